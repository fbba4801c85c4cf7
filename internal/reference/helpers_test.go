package reference

import (
	"errors"
	"strings"
	"testing"
)

const (
	hex64  = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	sha256 = "sha256:" + hex64
	sha512 = "sha512:" + hex64 + hex64
)

// checkErr asserts err is an *Error with the code and a message containing
// every part of want; code "" means no error expected.
func checkErr(t *testing.T, err error, code string, want ...string) {
	t.Helper()
	if code == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want *Error with code %s", err, err, code)
	}
	if e.Code != code {
		t.Fatalf("code = %s, want %s (message: %s)", e.Code, code, e.Message)
	}
	for _, w := range want {
		if !strings.Contains(e.Message, w) {
			t.Errorf("message %q does not contain %q", e.Message, w)
		}
	}
}

package reference

import "fmt"

// OCI distribution-spec error codes. The HTTP layer maps them to statuses.
// This package never returns UNSUPPORTED itself (a BlobUpload parses
// successfully); it is here so the answer to a BlobUpload uses the same
// vocabulary.
const (
	CodeNameInvalid   = "NAME_INVALID"
	CodeTagInvalid    = "TAG_INVALID"
	CodeDigestInvalid = "DIGEST_INVALID"
	CodeNameUnknown   = "NAME_UNKNOWN"
	CodeUnsupported   = "UNSUPPORTED"
	CodeNotFound      = "NOT_FOUND"
)

// Error is a parse/route failure in the OCI error vocabulary; the HTTP layer
// maps Code to a status and sends Message to the client as is, so Message is
// written for a person who has to fix their reference or configuration.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// maxQuoted bounds how much of client input is echoed in an error message, so
// a hostile 1 MB path cannot make a 1 MB error body or log line.
const maxQuoted = 80

// quote is %q for client input, truncated to maxQuoted bytes.
func quote(s string) string {
	if len(s) > maxQuoted {
		return fmt.Sprintf("%q...", s[:maxQuoted])
	}
	return fmt.Sprintf("%q", s)
}

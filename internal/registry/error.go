package registry

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"imagecache.io/imagecache/internal/cache"
	"imagecache.io/imagecache/internal/reference"
)

// regError is an OCI error answer: it knows its status and writes itself as the spec's error JSON.
type regError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter string
}

func (e *regError) Error() string { return e.Code + ": " + e.Message }

func (e *regError) write(w http.ResponseWriter) {
	if e.RetryAfter != "" {
		w.Header().Set("Retry-After", e.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Length")
	w.WriteHeader(e.Status)
	type detail struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	json.NewEncoder(w).Encode(map[string][]detail{"errors": {{Code: e.Code, Message: e.Message}}})
}

// asRegError maps the errors of the layers below to what the client gets.
func asRegError(err error) *regError {
	var re *regError
	var ce *cache.Error
	var pe *reference.Error
	switch {
	case errors.As(err, &re):
		return re
	case errors.As(err, &ce):
		return &regError{Status: ce.Status, Code: ce.Code, Message: ce.Message, RetryAfter: ce.RetryAfter}
	case errors.As(err, &pe):
		status := http.StatusBadRequest
		switch pe.Code {
		case reference.CodeNameUnknown, reference.CodeNotFound:
			status = http.StatusNotFound
		case reference.CodeUnsupported:
			status = http.StatusMethodNotAllowed
		}
		return &regError{Status: status, Code: pe.Code, Message: pe.Message}
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this answer.
		return &regError{Status: 499, Code: "UNKNOWN", Message: "request canceled"}
	}
	return &regError{Status: http.StatusInternalServerError, Code: "UNKNOWN", Message: err.Error()}
}

var errUnsupported = &regError{Status: http.StatusMethodNotAllowed, Code: reference.CodeUnsupported,
	Message: "imagecache is a read-only pull-through cache: push, delete and other writes are not supported; push to the upstream registry instead"}

package bothy

import (
	"errors"
	"fmt"
)

// Error codes. Only the http package maps them to statuses.
const (
	ECONFLICT     = "conflict"      // a compare-and-swap lost, or the thing already exists
	EINTERNAL     = "internal"      // a bug or an unexpected failure; its message is not shown to callers
	EINVALID      = "invalid"       // the input is malformed
	EINVALIDPATH  = "invalid_path"  // a path escapes the workspace, holds NUL, or is too long
	ENOTFOUND     = "not_found"     // the thing does not exist, or belongs to another tenant
	ETOOLARGE     = "too_large"     // the input is over a documented limit
	EUNAUTHORIZED = "unauthorized"  // no valid credential
	EFORBIDDEN    = "forbidden"     // a valid credential without the needed scope
	ECORRUPT      = "corrupt"       // stored data failed verification
	ENOTDIR       = "not_directory" // a path component is not a directory
	EISDIR        = "is_directory"  // the operation needs a file and found a directory
	ENOTEMPTY     = "not_empty"     // a directory is not empty
	EUNAVAILABLE  = "unavailable"   // the service that would do it is not running here, or cannot be reached now
	// EINSUFFICIENT means a disk the operation writes to is full; reads go on working.
	EINSUFFICIENT = "insufficient_storage"
)

// Error is a domain error: a machine-readable code and a message fit for the caller.
type Error struct {
	Code    string
	Message string
}

// Error implements the error interface.
func (e *Error) Error() string {
	return fmt.Sprintf("bothy error: code=%s message=%s", e.Code, e.Message)
}

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code string, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL for
// any other non-nil error, and "" for nil.
func ErrorCode(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the message of the first *Error in err's chain, and
// "internal error" for any other error, so internal details never reach a caller.
func ErrorMessage(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

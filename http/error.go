package http

import (
	"encoding/json"
	"errors"
	"io"
	nethttp "net/http"
	"strconv"

	"github.com/bothyhq/bothy"
)

// statuses maps domain error codes to HTTP statuses. This package is the only
// place that does. not_directory, is_directory and not_empty are 409: the
// request is well formed, but the workspace's present state refuses it.
// insufficient_storage is 507 (RFC 4918): a disk the server writes to is
// full.
var statuses = map[string]int{
	bothy.EINVALID:      nethttp.StatusBadRequest,
	bothy.EINVALIDPATH:  nethttp.StatusBadRequest,
	bothy.EUNAUTHORIZED: nethttp.StatusUnauthorized,
	bothy.EFORBIDDEN:    nethttp.StatusForbidden,
	bothy.ENOTFOUND:     nethttp.StatusNotFound,
	bothy.ECONFLICT:     nethttp.StatusConflict,
	bothy.ENOTDIR:       nethttp.StatusConflict,
	bothy.EISDIR:        nethttp.StatusConflict,
	bothy.ENOTEMPTY:     nethttp.StatusConflict,
	bothy.ETOOLARGE:     nethttp.StatusRequestEntityTooLarge,
	bothy.EUNAVAILABLE:  nethttp.StatusServiceUnavailable,
	bothy.EINSUFFICIENT: nethttp.StatusInsufficientStorage,
	bothy.ECORRUPT:      nethttp.StatusInternalServerError,
	bothy.EINTERNAL:     nethttp.StatusInternalServerError,
}

// retryAfter is the Retry-After, in seconds, of every 503 answer.
const retryAfter = "2"

// errorResponse is the body of every error: {"error": {"code", "message"}}.
type errorResponse struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError writes err as JSON with its status. Internal errors are logged
// here, at the edge, and shown to the caller only as "internal error".
func (s *Server) writeError(w nethttp.ResponseWriter, r *nethttp.Request, err error) {
	code := bothy.ErrorCode(err)
	status, ok := statuses[code]
	if !ok {
		status = nethttp.StatusInternalServerError
	}
	if status == nethttp.StatusInternalServerError {
		s.log.Error("http request failed", "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
	} else if _, bare := err.(*bothy.Error); !bare && (code == bothy.EUNAVAILABLE || code == bothy.EINSUFFICIENT) {
		// A classified driver or file system error: its cause is in the
		// chain, for the operator.
		s.log.Warn("http request failed", "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
	}
	if code == bothy.EUNAUTHORIZED {
		w.Header().Set("WWW-Authenticate", `Bearer realm="bothy"`)
	}
	if status == nethttp.StatusServiceUnavailable {
		// Unavailable is for now: the store is unreachable, the server is
		// stopping, a runtime is busy. A caller may try again.
		w.Header().Set("Retry-After", retryAfter)
	}
	writeJSON(w, status, errorResponse{errorBody{Code: code, Message: bothy.ErrorMessage(err)}})
}

// writeJSON writes v as the JSON body of a response with status.
func writeJSON(w nethttp.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// readJSON decodes the body of r, at most max bytes, into v. Unknown fields
// are refused, so that a misspelt option is an error rather than ignored.
func (s *Server) readJSON(w nethttp.ResponseWriter, r *nethttp.Request, max int64, v any) error {
	return s.decodeJSON(w, r, max, func(dec *json.Decoder) error { return dec.Decode(v) })
}

// decodeJSON runs decode on a decoder of the body of r, which reads at most
// max bytes. The body takes its length, or max if that is unknown, of the
// server's budget while it is decoded.
func (s *Server) decodeJSON(w nethttp.ResponseWriter, r *nethttp.Request, max int64, decode func(*json.Decoder) error) error {
	if r.ContentLength > max {
		return bothy.Errorf(bothy.ETOOLARGE, "request body is over %d bytes", max)
	}
	n := r.ContentLength
	if n < 0 {
		n = max
	}
	if !s.opts.Budget.Acquire(n) {
		return bothy.Errorf(bothy.EUNAVAILABLE, "the server is reading too many request bodies at once; retry")
	}
	defer s.opts.Budget.Release(n)
	dec := json.NewDecoder(nethttp.MaxBytesReader(w, r.Body, max))
	dec.DisallowUnknownFields()
	if err := decode(dec); err != nil {
		if e := tooLarge(err); e != nil {
			return e
		} else if bothy.ErrorCode(err) != bothy.EINTERNAL {
			return err // the decode's own refusal
		} else if errors.Is(err, io.EOF) {
			return bothy.Errorf(bothy.EINVALID, "request body is empty; want a JSON object")
		}
		return bothy.Errorf(bothy.EINVALID, "request body: %s", err.Error())
	}
	if dec.More() {
		return bothy.Errorf(bothy.EINVALID, "request body holds more than one JSON value")
	}
	return nil
}

// tooLarge returns ETOOLARGE if err comes from a MaxBytesReader, else nil.
func tooLarge(err error) error {
	var mb *nethttp.MaxBytesError
	if errors.As(err, &mb) {
		return bothy.Errorf(bothy.ETOOLARGE, "request body is over %d bytes", mb.Limit)
	}
	return nil
}

// queryInt parses an optional non-negative integer query parameter.
func queryInt(r *nethttp.Request, name string) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, bothy.Errorf(bothy.EINVALID, "query parameter %s must be a non-negative integer", name)
	}
	return n, nil
}

// queryBool parses an optional boolean query parameter: 1, true, 0, false.
func queryBool(r *nethttp.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, bothy.Errorf(bothy.EINVALID, "query parameter %s must be true or false", name)
	}
	return b, nil
}

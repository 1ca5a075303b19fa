package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
)

// Paths of the protocol over HTTP. All are POST with a JSON body and a
// bearer token: the agent's token for poll, a lease credential otherwise.
const (
	PathPrefix       = "/runtime/v1/"
	pathPoll         = PathPrefix + "poll"
	pathReady        = PathPrefix + "lease/ready"
	pathReleased     = PathPrefix + "lease/released"
	pathCommit       = PathPrefix + "lease/commit"
	pathCheckpointed = PathPrefix + "lease/checkpointed"
	pathApplied      = PathPrefix + "lease/applied"
	pathReport       = PathPrefix + "commands/{id}/report"
	pathEvents       = PathPrefix + "commands/{id}/events"
)

// maxBody bounds a request body: a batch of events is at most
// bothy.MaxEventsAppend events of at most bothy.MaxEventData bytes, and the
// agent sends far smaller batches.
const maxBody = 8 << 20

// Handler serves a Control over HTTP.
func Handler(c Control, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	mux := http.NewServeMux()
	handle := func(pattern string, fn func(r *http.Request, token string) (any, error)) {
		mux.HandleFunc("POST "+pattern, func(w http.ResponseWriter, r *http.Request) {
			token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			v, err := fn(r, token)
			if err != nil {
				code := bothy.ErrorCode(err)
				if code == bothy.EINTERNAL {
					log.Error("runtime request failed", "path", r.URL.Path, "err", err)
				} else if _, bare := err.(*bothy.Error); !bare && (code == bothy.EUNAVAILABLE || code == bothy.EINSUFFICIENT) {
					// A classified store error (unreachable, disk full):
					// its cause is in the chain, for the operator.
					log.Warn("runtime request failed", "path", r.URL.Path, "code", code, "err", err)
				}
				writeJSON(w, status(code), errorBody{Error: &bothy.Error{Code: code, Message: bothy.ErrorMessage(err)}})
				return
			}
			if v == nil {
				v = struct{}{}
			}
			writeJSON(w, http.StatusOK, v)
		})
	}
	handle(pathPoll, func(r *http.Request, tok string) (any, error) {
		var req PollRequest
		if err := readJSON(r, &req); err != nil {
			return nil, err
		}
		return c.Poll(r.Context(), tok, &req)
	})
	handle(pathReady, func(r *http.Request, tok string) (any, error) {
		var req ReadyRequest
		if err := readJSON(r, &req); err != nil {
			return nil, err
		}
		return nil, c.Ready(r.Context(), tok, &req)
	})
	handle(pathReleased, func(r *http.Request, tok string) (any, error) {
		var req ReleaseRequest
		if err := readJSON(r, &req); err != nil {
			return nil, err
		}
		return nil, c.Released(r.Context(), tok, &req)
	})
	handle(pathCommit, func(r *http.Request, tok string) (any, error) {
		var req CommitRequest
		if err := readJSON(r, &req); err != nil {
			return nil, err
		}
		return c.Commit(r.Context(), tok, &req)
	})
	handle(pathCheckpointed, func(r *http.Request, tok string) (any, error) {
		var req CheckpointedRequest
		if err := readJSON(r, &req); err != nil {
			return nil, err
		}
		return nil, c.Checkpointed(r.Context(), tok, &req)
	})
	handle(pathApplied, func(r *http.Request, tok string) (any, error) {
		var req AppliedRequest
		if err := readJSON(r, &req); err != nil {
			return nil, err
		}
		return nil, c.Applied(r.Context(), tok, &req)
	})
	handle(pathReport, func(r *http.Request, tok string) (any, error) {
		var req Report
		if err := readJSON(r, &req); err != nil {
			return nil, err
		}
		return nil, c.Report(r.Context(), tok, r.PathValue("id"), &req)
	})
	handle(pathEvents, func(r *http.Request, tok string) (any, error) {
		var req eventsRequest
		if err := readJSON(r, &req); err != nil {
			return nil, err
		}
		return c.AppendEvents(r.Context(), tok, r.PathValue("id"), req.Events)
	})
	return mux
}

type eventsRequest struct {
	Events []bothy.Event `json:"events"`
}

type errorBody struct {
	Error *bothy.Error `json:"error"`
}

func status(code string) int {
	switch code {
	case bothy.EINVALID, bothy.EINVALIDPATH:
		return http.StatusBadRequest
	case bothy.EUNAUTHORIZED:
		return http.StatusUnauthorized
	case bothy.EFORBIDDEN:
		return http.StatusForbidden
	case bothy.ENOTFOUND:
		return http.StatusNotFound
	case bothy.ECONFLICT:
		return http.StatusConflict
	case bothy.ETOOLARGE:
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}

func readJSON(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return bothy.Errorf(bothy.EINVALID, "read request: %v", err)
	} else if len(b) > maxBody {
		return bothy.Errorf(bothy.ETOOLARGE, "request body over %d bytes", maxBody)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return bothy.Errorf(bothy.EINVALID, "request body: %v", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// Client calls a Control over HTTP. It is safe for concurrent use.
type Client struct {
	URL  string // the control plane's base URL
	HTTP *http.Client
}

var _ Control = (*Client)(nil)

// NewClient returns a client of the control plane at url.
func NewClient(url string) *Client {
	return &Client{URL: strings.TrimRight(url, "/"), HTTP: &http.Client{Timeout: 2 * time.Minute}}
}

func (c *Client) call(ctx context.Context, path, token string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e errorBody
		if json.Unmarshal(body, &e) == nil && e.Error != nil && e.Error.Code != "" {
			return e.Error
		}
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(body, out)
}

func (c *Client) Poll(ctx context.Context, agentToken string, req *PollRequest) (*PollResponse, error) {
	var out PollResponse
	return &out, c.call(ctx, pathPoll, agentToken, req, &out)
}

func (c *Client) Ready(ctx context.Context, cred string, req *ReadyRequest) error {
	return c.call(ctx, pathReady, cred, req, nil)
}

func (c *Client) Released(ctx context.Context, cred string, req *ReleaseRequest) error {
	return c.call(ctx, pathReleased, cred, req, nil)
}

func (c *Client) Commit(ctx context.Context, cred string, req *CommitRequest) (*bothy.Revision, error) {
	var out bothy.Revision
	return &out, c.call(ctx, pathCommit, cred, req, &out)
}

func (c *Client) Checkpointed(ctx context.Context, cred string, req *CheckpointedRequest) error {
	return c.call(ctx, pathCheckpointed, cred, req, nil)
}

func (c *Client) Applied(ctx context.Context, cred string, req *AppliedRequest) error {
	return c.call(ctx, pathApplied, cred, req, nil)
}

func (c *Client) Report(ctx context.Context, cred, commandID string, req *Report) error {
	return c.call(ctx, strings.Replace(pathReport, "{id}", commandID, 1), cred, req, nil)
}

func (c *Client) AppendEvents(ctx context.Context, cred, commandID string, events []bothy.Event) (*EventsResponse, error) {
	var out EventsResponse
	return &out, c.call(ctx, strings.Replace(pathEvents, "{id}", commandID, 1), cred, eventsRequest{events}, &out)
}

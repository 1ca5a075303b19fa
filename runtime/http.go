package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	pathCredential   = PathPrefix + "agent/credential"
)

// Caps of request bodies by route. MaxBody bounds a poll (the leases an
// agent holds), a commit (its packs), a release (its residue) and a batch
// of events, which is at most bothy.MaxEventsAppend events of at most
// bothy.MaxEventData bytes (the agent sends far smaller batches);
// MaxSmallBody bounds the other messages, which hold a few fields.
const (
	MaxBody      = 8 << 20
	MaxSmallBody = 1 << 20
)

// A Budget bounds the bytes of request bodies being read and decoded at
// once, across routes and servers (http.Budget is one).
type Budget interface {
	// Acquire takes n bytes of the budget, or reports false and takes
	// nothing if fewer are left.
	Acquire(n int64) bool
	// Release gives back n bytes taken by Acquire.
	Release(n int64)
}

// An Authenticator checks the credential of a request before Handler reads
// its body, so that a caller without one costs no memory for it. The
// methods of Control check the credential again, fully.
type Authenticator interface {
	// AuthenticateAgent checks an agent token, for any agent: Poll then
	// checks that it is the token of the agent the request names.
	AuthenticateAgent(ctx context.Context, token string) error
	// AuthenticateLease checks a lease credential's signature and expiry.
	AuthenticateLease(ctx context.Context, cred string) error
	// AuthenticateEnrol checks a join token or a store agent token, for
	// any agent: AgentCredential then checks it fully.
	AuthenticateEnrol(ctx context.Context, token string) error
}

// A Server is a Control that Handler can serve.
type Server interface {
	Control
	Authenticator
}

// Handler serves a Control over HTTP. Each request's credential is checked
// before its body is read, and its body is capped by route while it is
// decoded. budget, if not nil, bounds the bytes of bodies being read at
// once: past it a request is 503 unavailable.
func Handler(c Server, log *slog.Logger, budget Budget) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	mux := http.NewServeMux()
	// handle serves pattern: auth checks the token, then decode reads
	// the body, at most max bytes, into a request that call runs.
	handle := func(pattern string, auth func(context.Context, string) error, max int64, call func(r *http.Request, token string, dec func(any) error) (any, error)) {
		mux.HandleFunc("POST "+pattern, func(w http.ResponseWriter, r *http.Request) {
			token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			err := auth(r.Context(), token)
			var v any
			if err == nil {
				v, err = call(r, token, func(req any) error { return readJSON(w, r, max, budget, req) })
			}
			if err != nil {
				code := bothy.ErrorCode(err)
				if code == bothy.EINTERNAL {
					log.Error("runtime request failed", "path", r.URL.Path, "err", err)
				} else if _, bare := err.(*bothy.Error); !bare && (code == bothy.EUNAVAILABLE || code == bothy.EINSUFFICIENT) {
					// A classified store error (unreachable, disk full):
					// its cause is in the chain, for the operator.
					log.Warn("runtime request failed", "path", r.URL.Path, "code", code, "err", err)
				}
				if code == bothy.EUNAVAILABLE {
					w.Header().Set("Retry-After", "1")
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
	agent, lease := c.AuthenticateAgent, c.AuthenticateLease
	handle(pathPoll, agent, MaxBody, func(r *http.Request, tok string, dec func(any) error) (any, error) {
		var req PollRequest
		if err := dec(&req); err != nil {
			return nil, err
		}
		return c.Poll(r.Context(), tok, &req)
	})
	handle(pathReady, lease, MaxSmallBody, func(r *http.Request, tok string, dec func(any) error) (any, error) {
		var req ReadyRequest
		if err := dec(&req); err != nil {
			return nil, err
		}
		return nil, c.Ready(r.Context(), tok, &req)
	})
	handle(pathReleased, lease, MaxBody, func(r *http.Request, tok string, dec func(any) error) (any, error) {
		var req ReleaseRequest
		if err := dec(&req); err != nil {
			return nil, err
		}
		return nil, c.Released(r.Context(), tok, &req)
	})
	handle(pathCommit, lease, MaxBody, func(r *http.Request, tok string, dec func(any) error) (any, error) {
		var req CommitRequest
		if err := dec(&req); err != nil {
			return nil, err
		}
		return c.Commit(r.Context(), tok, &req)
	})
	handle(pathCheckpointed, lease, MaxSmallBody, func(r *http.Request, tok string, dec func(any) error) (any, error) {
		var req CheckpointedRequest
		if err := dec(&req); err != nil {
			return nil, err
		}
		return nil, c.Checkpointed(r.Context(), tok, &req)
	})
	handle(pathApplied, lease, MaxSmallBody, func(r *http.Request, tok string, dec func(any) error) (any, error) {
		var req AppliedRequest
		if err := dec(&req); err != nil {
			return nil, err
		}
		return nil, c.Applied(r.Context(), tok, &req)
	})
	handle(pathReport, lease, MaxSmallBody, func(r *http.Request, tok string, dec func(any) error) (any, error) {
		var req Report
		if err := dec(&req); err != nil {
			return nil, err
		}
		return nil, c.Report(r.Context(), tok, r.PathValue("id"), &req)
	})
	handle(pathEvents, lease, MaxBody, func(r *http.Request, tok string, dec func(any) error) (any, error) {
		var req eventsRequest
		if err := dec(&req); err != nil {
			return nil, err
		}
		return c.AppendEvents(r.Context(), tok, r.PathValue("id"), req.Events)
	})
	handle(pathCredential, c.AuthenticateEnrol, MaxSmallBody, func(r *http.Request, tok string, dec func(any) error) (any, error) {
		var req CredentialRequest
		if err := dec(&req); err != nil {
			return nil, err
		}
		return c.AgentCredential(r.Context(), tok, &req)
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
	case bothy.EUNAVAILABLE:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// readJSON decodes the body of r, at most max bytes, into v as it reads it.
// A body of unknown length takes max bytes of budget.
func readJSON(w http.ResponseWriter, r *http.Request, max int64, budget Budget, v any) error {
	if r.ContentLength > max {
		return bothy.Errorf(bothy.ETOOLARGE, "request body over %d bytes", max)
	}
	if budget != nil {
		n := r.ContentLength
		if n < 0 {
			n = max
		}
		if !budget.Acquire(n) {
			return bothy.Errorf(bothy.EUNAVAILABLE, "the server is reading too many request bodies at once; retry")
		}
		defer budget.Release(n)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, max))
	err := dec.Decode(v)
	if err == nil {
		// Like json.Unmarshal, refuse anything after the value.
		if _, err = dec.Token(); err == io.EOF {
			return nil
		} else if err == nil {
			err = errors.New("data after the JSON value")
		}
	}
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return bothy.Errorf(bothy.ETOOLARGE, "request body over %d bytes", max)
	}
	return bothy.Errorf(bothy.EINVALID, "request body: %v", err)
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
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
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

func (c *Client) AgentCredential(ctx context.Context, token string, req *CredentialRequest) (*CredentialResponse, error) {
	var out CredentialResponse
	return &out, c.call(ctx, pathCredential, token, req, &out)
}

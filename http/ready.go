package http

import (
	"context"
	nethttp "net/http"
	"time"

	"github.com/bothyhq/bothy"
)

// Check is one readiness check of GET /readyz: Check returns nil when the
// server can serve what Name names, else why not (its message, as
// bothy.ErrorMessage shows it, is the answer's).
type Check struct {
	Name  string
	Check func(ctx context.Context) error
}

// pinger is a store that can tell whether its database can be reached
// (sqldb.DB).
type pinger interface {
	Ping(ctx context.Context) error
}

// readyTimeout bounds each readiness check, so that /readyz answers
// promptly even when a check hangs on an unreachable store.
const readyTimeout = 2 * time.Second

// readyResponse is the body of GET /readyz: ready, and each check's
// result, "ok" or the reason it failed.
type readyResponse struct {
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks"`
}

// handleReady answers 200 when the store can be reached and every check of
// Options.Checks passes, else 503 with Retry-After; the body says which
// check failed.
func (s *Server) handleReady(w nethttp.ResponseWriter, r *nethttp.Request, _ *bothy.Principal) error {
	checks := s.opts.Checks
	if p, ok := s.store.(pinger); ok {
		checks = append([]Check{{Name: "store", Check: p.Ping}}, checks...)
	}
	resp := readyResponse{Ready: true, Checks: map[string]string{}}
	for _, c := range checks {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		err := c.Check(ctx)
		cancel()
		if err == nil {
			resp.Checks[c.Name] = "ok"
			continue
		}
		resp.Ready = false
		resp.Checks[c.Name] = bothy.ErrorCode(err) + ": " + bothy.ErrorMessage(err)
		s.log.Warn("not ready", "check", c.Name, "err", err)
	}
	status := nethttp.StatusOK
	if !resp.Ready {
		status = nethttp.StatusServiceUnavailable
		w.Header().Set("Retry-After", retryAfter)
	}
	writeJSON(w, status, resp)
	return nil
}

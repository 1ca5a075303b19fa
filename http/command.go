package http

import (
	"context"
	"encoding/json"
	"io"
	nethttp "net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
)

// Event streams read this many events per batch, and hold at most one batch:
// a reader slower than the command blocks the handler's writes on its
// socket rather than growing the server's memory.
const eventBatch = 64

// keepAlive bounds each wait for a command's next event; when it passes
// with nothing new, the stream gets a comment line, so that proxies and
// clients see a live connection.
const keepAlive = 15 * time.Second

// CommandList is the body of a command listing, oldest first.
type CommandList struct {
	Commands []*bothy.Command `json:"commands"`
}

// errNoCompute answers the routes that need a ComputeService on a server
// without one.
var errNoCompute = bothy.Errorf(bothy.EUNAVAILABLE, "this server runs no commands: it has no compute service")

// handleRunCommand admits a command: 201 when it is created, 200 when the
// idempotency key named an existing one. With wait set it answers 200 only
// once the command has ended, whichever command the key named.
func (s *Server) handleRunCommand(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	if s.compute == nil {
		return errNoCompute
	}
	var req bothy.RunRequest
	if err := s.readJSON(w, r, s.opts.MaxRunSize, &req); err != nil {
		return err
	} else if err := req.Validate(); err != nil {
		return err
	}
	ctx := r.Context()
	// Admission checks the caller's authority (bothy.AdmitRun): a token
	// limited to one profile cannot run on a computer someone created with
	// another.
	auth := p.Authority()
	req.Authority = &auth
	cmd, created, err := s.compute.RunCommand(ctx, p.TenantID, r.PathValue("id"), req)
	if err != nil {
		return err
	}
	status := nethttp.StatusOK
	if created && !req.Wait {
		status = nethttp.StatusCreated
	}
	if req.Wait && !bothy.CommandTerminal(cmd.State) {
		if cmd, err = s.compute.WaitCommand(ctx, p.TenantID, cmd.ID); err != nil {
			if ctx.Err() != nil {
				return nil // the caller left; nobody reads an answer
			}
			return err
		}
	}
	writeJSON(w, status, cmd)
	return nil
}

func (s *Server) handleListCommands(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	ctx, id := r.Context(), r.PathValue("id")
	// The store lists nothing for a missing computer; the API says 404.
	if _, err := s.store.FindComputer(ctx, p.TenantID, id); err != nil {
		return err
	}
	f := bothy.CommandFilter{ComputerID: id, State: r.URL.Query().Get("state")}
	if f.State != "" && !bothy.ValidCommandState(f.State) {
		return bothy.Errorf(bothy.EINVALID, "unknown command state %q", f.State)
	}
	var err error
	if f.Offset, err = queryInt(r, "offset"); err != nil {
		return err
	} else if f.Limit, err = queryInt(r, "limit"); err != nil {
		return err
	}
	cmds, err := s.store.ListCommands(ctx, p.TenantID, f)
	if err != nil {
		return err
	}
	if cmds == nil {
		cmds = []*bothy.Command{}
	}
	writeJSON(w, nethttp.StatusOK, CommandList{Commands: cmds})
	return nil
}

func (s *Server) handleGetCommand(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	cmd, err := s.store.FindCommand(r.Context(), p.TenantID, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, nethttp.StatusOK, cmd)
	return nil
}

func (s *Server) handleCancelCommand(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	if s.compute == nil {
		return errNoCompute
	}
	cmd, err := s.compute.CancelCommand(r.Context(), p.TenantID, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, nethttp.StatusOK, cmd)
	return nil
}

func (s *Server) handleCheckpoint(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	if s.compute == nil {
		return errNoCompute
	}
	rev, err := s.compute.Checkpoint(r.Context(), p.TenantID, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, nethttp.StatusOK, rev)
	return nil
}

// eventsAfter returns the seq a stream starts after: the query parameter
// after, else the Last-Event-ID header of a reconnecting EventSource, else 0.
func eventsAfter(r *nethttp.Request) (int64, error) {
	v, name := r.URL.Query().Get("after"), "query parameter after"
	if v == "" {
		v, name = strings.TrimSpace(r.Header.Get("Last-Event-ID")), "Last-Event-ID"
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, bothy.Errorf(bothy.EINVALID, "%s must be a non-negative integer", name)
	}
	return n, nil
}

// handleCommandEvents streams a command's events after a seq as
// server-sent events: each event is "id: SEQ", "event: KIND" and "data:
// JSON"; the stream ends with an "end" event holding the command once it is
// terminal and every event has been sent. A failure after the stream began
// is an "error" event holding the usual error body. Without a
// ComputeService, the stream ends after the stored events, with "end" only
// if the command is terminal.
func (s *Server) handleCommandEvents(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	ctx, id := r.Context(), r.PathValue("id")
	after, err := eventsAfter(r)
	if err != nil {
		return err
	}
	if _, err := s.store.FindCommand(ctx, p.TenantID, id); err != nil {
		return err
	}
	rc := nethttp.NewResponseController(w)
	// A stream outlives any write timeout meant for ordinary responses.
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(nethttp.StatusOK)
	if err := rc.Flush(); err != nil {
		return nil
	}
	fail := func(err error) error {
		if ctx.Err() == nil {
			s.streamError(w, r, err)
			rc.Flush()
		}
		return nil
	}
	// The token was resolved when the stream began; it is resolved again
	// every TokenRecheck, so that a revoked or expired token's stream ends.
	checked, wrote := time.Now(), time.Now()
	for {
		if time.Since(checked) >= s.opts.TokenRecheck {
			if _, err := s.authenticate(r); err != nil {
				return fail(err)
			}
			checked = time.Now()
		}
		evs, err := s.store.ListEvents(ctx, p.TenantID, id, after, eventBatch)
		if err != nil {
			return fail(err)
		}
		for _, e := range evs {
			if err := writeEvent(w, strconv.FormatInt(e.Seq, 10), e.Kind, e); err != nil {
				return nil
			}
			after = e.Seq
		}
		if len(evs) > 0 {
			if err := rc.Flush(); err != nil {
				return nil
			}
			wrote = time.Now()
		}
		if len(evs) == eventBatch {
			continue
		}
		cmd, err := s.store.FindCommand(ctx, p.TenantID, id)
		if err != nil {
			return fail(err)
		} else if cmd.LastSeq > after {
			continue
		} else if bothy.CommandTerminal(cmd.State) {
			// A terminal command takes no new events, so none can follow.
			writeEvent(w, "", "end", cmd)
			rc.Flush()
			return nil
		} else if s.compute == nil {
			return nil
		}
		// Wait for the next event until a keepalive is due, resolving the
		// token again on the way as often as TokenRecheck asks.
		var timedOut bool
		for {
			wait := min(keepAlive-time.Since(wrote), s.opts.TokenRecheck-time.Since(checked))
			wctx, cancel := context.WithTimeout(ctx, max(wait, 0))
			err = s.compute.WaitEvents(wctx, p.TenantID, id, after)
			timedOut = wctx.Err() != nil
			cancel()
			if err == nil || !timedOut || ctx.Err() != nil || time.Since(wrote) >= keepAlive {
				break
			}
			if time.Since(checked) >= s.opts.TokenRecheck {
				if _, err := s.authenticate(r); err != nil {
					return fail(err)
				}
				checked = time.Now()
			}
		}
		switch {
		case ctx.Err() != nil, bothy.ErrorCode(err) == bothy.EUNAVAILABLE:
			// The client went away, or the server stops: ending the stream
			// without an end event makes a client resume elsewhere.
			return nil
		case err != nil && timedOut:
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
				return nil
			} else if err := rc.Flush(); err != nil {
				return nil
			}
			wrote = time.Now()
		case err != nil:
			return fail(err)
		}
	}
}

// writeEvent writes one server-sent event whose data is v as JSON, on one
// line; id "" writes no id line, so that a client's last event id stays
// the seq of the last command event.
func writeEvent(w io.Writer, id, kind string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.Grow(len(data) + len(kind) + len(id) + 24)
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	b.WriteString("event: " + kind + "\ndata: ")
	b.Write(data)
	b.WriteString("\n\n")
	_, err = io.WriteString(w, b.String())
	return err
}

// streamError writes err as an "error" event, logging internal errors as
// writeError does.
func (s *Server) streamError(w io.Writer, r *nethttp.Request, err error) {
	code := bothy.ErrorCode(err)
	if status, ok := statuses[code]; !ok || status == nethttp.StatusInternalServerError {
		s.log.Error("event stream failed", "path", r.URL.Path, "code", code, "err", err)
	}
	writeEvent(w, "", "error", errorResponse{errorBody{Code: code, Message: bothy.ErrorMessage(err)}})
}

package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/redact"
)

// run accepts a command: its accept record is durable before its process
// starts, and a command id already journaled is never started again.
func (s *server) run(id string, rs *bothy.RunSpec) (*Status, error) {
	if err := rs.Validate(); err != nil {
		return nil, err
	}
	// Built before the lock: a large secret takes a moment.
	red, err := redactor(rs)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if _, ok := s.cmds[id]; ok {
		s.mu.Unlock()
		return s.status(id, true), nil
	}
	if s.stopping {
		s.mu.Unlock()
		return nil, bothy.Errorf(bothy.ECONFLICT, "the supervisor is shutting down")
	}
	accepted := *rs
	accepted.Secrets, accepted.SecretFiles = nil, nil // never on disk
	b, _ := json.Marshal(&accepted)
	// Held across the fsync so that two Runs of one id cannot both start.
	j, err := createJournal(s.cmdDir, id, b, s.cfg.RetainBytes)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	ctx, cancel := context.WithCancel(s.runCtx)
	c := &command{j: j, cancel: cancel}
	s.cmds[id] = c
	s.runs.Add(1)
	s.mu.Unlock()

	spec := rs.ExecSpec()
	spec.Stdin = bytes.NewReader(rs.Stdin)
	spec.Stdout = &output{s: s, c: c, kind: kindStdout}
	spec.Stderr = &output{s: s, c: c, kind: kindStderr}
	var flush []*redacted
	if red != nil {
		// Output is redacted before it reaches the journal and the
		// archive, so neither ever holds a secret value.
		out, errw := &redacted{w: red.Writer(spec.Stdout)}, &redacted{w: red.Writer(spec.Stderr)}
		spec.Stdout, spec.Stderr, flush = out, errw, []*redacted{out, errw}
	}
	spec.Env[MarkEnv] = s.mark
	go s.exec(ctx, c, spec, flush)
	return s.status(id, false), nil
}

// redactor returns the redactor of the values of rs's secrets, nil if it
// has none. A value that is not empty must be long enough to redact.
func redactor(rs *bothy.RunSpec) (*redact.Redactor, error) {
	var values [][]byte
	for _, m := range []map[string]string{rs.Secrets, rs.SecretFiles} {
		for k, v := range m {
			if len(v) > 0 && len(v) < redact.MinValueBytes {
				return nil, bothy.Errorf(bothy.EINVALID, "secret %s is shorter than %d bytes: too short to redact from output", k, redact.MinValueBytes)
			}
			values = append(values, []byte(v))
		}
	}
	if len(values) == 0 {
		return nil, nil
	}
	red, err := redact.New(values)
	if err != nil {
		return nil, bothy.Errorf(bothy.EINVALID, "a secret is too short to redact")
	}
	return red, nil
}

func (s *server) exec(ctx context.Context, c *command, spec bothy.ExecSpec, flush []*redacted) {
	defer s.runs.Done()
	res, err := s.cfg.Provider.Exec(ctx, s.h, spec)
	// What the redactors hold back goes out before the exit record.
	for _, r := range flush {
		r.flush()
	}
	s.mu.Lock()
	cancelled, diskLimited := c.cancelled, c.diskLimited
	c.cancel()
	c.cancel = nil
	s.mu.Unlock()
	c.j.mu.Lock()
	dropped, full := c.j.dropped, c.j.full
	c.j.mu.Unlock()
	kind, data := kindExit, []byte(nil)
	if res != nil {
		if diskLimited && cancelled {
			// Cancelled for the scratch limit: that is how it ended.
			res.DiskLimited, cancelled = true, false
		}
		if full {
			// Killed, or ended, with output that found no room: its
			// output is incomplete, whatever else happened.
			cancelled = false
		}
		data, _ = json.Marshal(bothy.Exit{ExecResult: *res, Cancelled: cancelled, DroppedBytes: dropped, DiskFull: full})
	} else {
		e := &bothy.Error{Code: bothy.ErrorCode(err), Message: bothy.ErrorMessage(err)}
		if e.Code == bothy.EINTERNAL {
			s.log.Error("exec", "command", c.j.id, "err", err)
		}
		f := FinalState{State: bothy.RunFailed, Error: e}
		if full {
			f.Reason = "disk_full"
		}
		kind, data = kindState, mustJSON(f)
	}
	if err := c.j.finish(kind, data); err != nil {
		s.log.Error("journal exit", "command", c.j.id, "err", err)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// output is the writer of one stream of a command. It never fails, so
// that the provider keeps draining the pipe; a journal error is logged.
// Output that finds no room on the disk kills the command, as the scratch
// limit does: it ends disk_full rather than claim an output it lost.
type output struct {
	s    *server
	c    *command
	kind byte
}

func (o *output) Write(p []byte) (int, error) {
	j := o.c.j
	err := j.output(o.kind, p)
	if errors.Is(err, errDiskFull) {
		o.s.log.Error("no room to journal a command's output; killing it", "command", j.id, "err", err)
		o.s.mu.Lock()
		if o.c.cancel != nil {
			o.c.cancelled = true
			o.c.cancel()
		}
		o.s.mu.Unlock()
	} else if err != nil {
		j.mu.Lock()
		first := j.werr == nil
		j.werr = err
		j.mu.Unlock()
		if first {
			o.s.log.Error("journal output", "command", j.id, "err", err)
		}
	}
	return len(p), nil
}

// redacted is the redacting writer of one stream of a command with
// secrets, in front of its output. Like output it never fails. After
// flush it drops what is written: a provider does not write after Exec
// returns, and if one did, the bytes could not be redacted as a whole.
type redacted struct {
	mu   sync.Mutex
	w    *redact.Writer
	done bool
}

var _ io.Writer = (*redacted)(nil)

func (r *redacted) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.done {
		r.w.Write(p)
	}
	return len(p), nil
}

func (r *redacted) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.done {
		r.w.Flush()
		r.done = true
	}
}

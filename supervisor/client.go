package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/redact"
)

// Operations of the protocol. A client opens one connection per request
// and writes one JSON line, a Request; the supervisor answers with one
// JSON line, a Response. For OpEvents the Response is followed by one
// bothy.Event per line, ending with the command's terminal event (exit, or
// a state of failed or lost), after which the supervisor closes the
// connection. One connection per stream is the flow control: a stream
// that is not read stalls only itself.
const (
	OpHello    = "hello"
	OpRun      = "run"
	OpStatus   = "status"
	OpEvents   = "events"
	OpAck      = "ack"
	OpCancel   = "cancel"
	OpShutdown = "shutdown"
)

// States of a command in a Status.
const (
	// StateNeverSeen: the supervisor has no journal of the command, so it
	// never started it here and it may be dispatched once more.
	StateNeverSeen = "never_seen"
	// StateRunning: accepted and its process may be running.
	StateRunning = "running"
	// StateFinished: the process ended; Exit says how.
	StateFinished = "finished"
	// StateFailed: the provider could not run the command; Error says why.
	StateFailed = "failed"
	// StateLost: the supervisor that ran the command died while it ran;
	// its process was killed at the supervisor's restart, its output up to
	// then is kept, and it is never run again.
	StateLost = "lost"
)

// MaxStdin is the most standard input bytes a Run may carry.
const MaxStdin = 1 << 20

// Request is one request line. Which fields matter depends on Op.
type Request struct {
	Op        string `json:"op"`
	CommandID string `json:"command_id,omitempty"`
	RunSpec
	After int64 `json:"after,omitempty"` // OpEvents: stream events with seq > After
	Seq   int64 `json:"seq,omitempty"`   // OpAck: the highest seq received
	// DiskLimited (OpCancel) cancels the command for the scratch limit:
	// its exit says disk_limited, not cancelled.
	DiskLimited bool `json:"disk_limited,omitempty"`
}

// RunSpec is the command of a Run. Its accept record journals all of it
// but Secrets.
type RunSpec struct {
	Argv      []string          `json:"argv,omitempty"`
	Script    string            `json:"script,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Stdin     []byte            `json:"stdin,omitempty"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
	// Limits are the command's own limits (bothy.ExecSpec.Limits).
	Limits bothy.Limits `json:"limits,omitzero"`
	// Secrets are environment variables (name → value) holding secret
	// values. They travel in the run request only: the supervisor adds
	// them to the command's environment for Provider.Exec and writes them
	// to no file (not the accept record, not its log), and it redacts
	// their values, and common encodings of them (see package redact),
	// from the command's output before journaling it. A name must not
	// also be in Env. A value must be text (UTF-8, no NUL) and, unless
	// empty, at least redact.MinValueBytes long.
	Secrets map[string]string `json:"secrets,omitempty"`
	// SecretFiles are secrets given as files (bothy.ExecSpec.SecretFiles):
	// variable → value, kept and redacted as Secrets are.
	SecretFiles map[string]string `json:"secret_files,omitempty"`
}

// Response is the answer line to a Request.
type Response struct {
	Error  *bothy.Error `json:"error,omitempty"`
	Status *Status      `json:"status,omitempty"`
	Lease  string       `json:"lease,omitempty"` // OpHello: the lease id
}

// Status is what the supervisor knows of a command.
type Status struct {
	CommandID string `json:"command_id"`
	State     string `json:"state"`
	// Existing is set on a Run whose command id was already journaled: it
	// returned the existing command and started nothing.
	Existing  bool         `json:"existing,omitempty"`
	LastSeq   int64        `json:"last_seq"`
	AckedSeq  int64        `json:"acked_seq"`
	Truncated bool         `json:"truncated,omitempty"`
	Exit      *Exit        `json:"exit,omitempty"`
	Error     *bothy.Error `json:"error,omitempty"`
}

// Exit is the fields of an exit event: how the process ended.
type Exit struct {
	bothy.ExecResult
	// Cancelled reports that a Cancel (or the supervisor's shutdown)
	// killed the command.
	Cancelled bool `json:"cancelled,omitempty"`
	// DroppedBytes counts the output dropped after the truncated event.
	DroppedBytes int64 `json:"dropped_bytes,omitempty"`
}

// finalState is the fields of a terminal state event.
type finalState struct {
	State  string       `json:"state"`
	Reason string       `json:"reason,omitempty"`
	Error  *bothy.Error `json:"error,omitempty"`
}

// Client talks to one supervisor over its unix socket. It is safe for
// concurrent use.
type Client struct {
	socket string
	Lease  string // the lease id the supervisor serves

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// Dial connects to the supervisor listening on socket and checks that it
// answers.
func Dial(ctx context.Context, socket string) (*Client, error) {
	c := &Client{socket: socket, conns: make(map[net.Conn]struct{})}
	resp, err := c.call(ctx, &Request{Op: OpHello})
	if err != nil {
		return nil, err
	}
	c.Lease = resp.Lease
	return c, nil
}

// Close closes the client and every stream it has open. The supervisor
// and its commands are not affected.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for conn := range c.conns {
		conn.Close()
	}
	clear(c.conns)
	return nil
}

func (c *Client) open(ctx context.Context, req *Request) (net.Conn, *bufio.Reader, *Response, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("dial supervisor: %w", err)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		conn.Close()
		return nil, nil, nil, net.ErrClosed
	}
	c.conns[conn] = struct{}{}
	c.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	fail := func(err error) (net.Conn, *bufio.Reader, *Response, error) {
		c.forget(conn)
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, nil, nil, err
	}
	b, _ := json.Marshal(req)
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return fail(fmt.Errorf("send %s: %w", req.Op, err))
	}
	r := bufio.NewReaderSize(conn, 64<<10)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return fail(fmt.Errorf("read %s response: %w", req.Op, err))
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return fail(fmt.Errorf("decode %s response: %w", req.Op, err))
	}
	if resp.Error != nil {
		return fail(resp.Error)
	}
	return conn, r, &resp, nil
}

func (c *Client) forget(conn net.Conn) {
	conn.Close()
	c.mu.Lock()
	delete(c.conns, conn)
	c.mu.Unlock()
}

func (c *Client) call(ctx context.Context, req *Request) (*Response, error) {
	conn, _, resp, err := c.open(ctx, req)
	if err != nil {
		return nil, err
	}
	c.forget(conn)
	return resp, nil
}

// Run starts a command once. If id was already journaled it starts
// nothing and returns the existing command's status with Existing set.
// When Run returns without error the command's accept record is on disk.
func (c *Client) Run(ctx context.Context, id string, spec RunSpec) (*Status, error) {
	// JSON would silently replace invalid UTF-8, and a secret changed on
	// the way would be neither right in the environment nor redacted.
	for _, m := range []map[string]string{spec.Secrets, spec.SecretFiles} {
		for k, v := range m {
			if !utf8.ValidString(v) {
				return nil, bothy.Errorf(bothy.EINVALID, "secret %s is not valid UTF-8: a secret's value must be text", k)
			}
		}
	}
	resp, err := c.call(ctx, &Request{Op: OpRun, CommandID: id, RunSpec: spec})
	if err != nil {
		return nil, err
	}
	return resp.Status, nil
}

// Status returns a command's status; an unknown id is StateNeverSeen.
func (c *Client) Status(ctx context.Context, id string) (*Status, error) {
	resp, err := c.call(ctx, &Request{Op: OpStatus, CommandID: id})
	if err != nil {
		return nil, err
	}
	return resp.Status, nil
}

// Ack records that every event up to seq was received and stored
// elsewhere. Acks are advisory (they allow later compaction): losing one
// only means events are sent again.
func (c *Client) Ack(ctx context.Context, id string, seq int64) error {
	_, err := c.call(ctx, &Request{Op: OpAck, CommandID: id, Seq: seq})
	return err
}

// Cancel kills a running command's process tree; its exit event then has
// Cancelled set. Cancelling an ended command changes nothing.
func (c *Client) Cancel(ctx context.Context, id string) (*Status, error) {
	return c.cancel(ctx, &Request{Op: OpCancel, CommandID: id})
}

// CancelDiskLimited cancels a command as Cancel does, because the
// lease's writable layer grew past its scratch limit: its exit record
// says DiskLimited instead of Cancelled.
func (c *Client) CancelDiskLimited(ctx context.Context, id string) (*Status, error) {
	return c.cancel(ctx, &Request{Op: OpCancel, CommandID: id, DiskLimited: true})
}

func (c *Client) cancel(ctx context.Context, req *Request) (*Status, error) {
	resp, err := c.call(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.Status, nil
}

// Shutdown cancels every running command, waits for their exit events and
// stops the supervisor.
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.call(ctx, &Request{Op: OpShutdown})
	return err
}

// Events streams a command's events with seq greater than after, then
// follows it live until its terminal event. An unknown id is ENOTFOUND.
func (c *Client) Events(ctx context.Context, id string, after int64) (*EventStream, error) {
	conn, r, _, err := c.open(ctx, &Request{Op: OpEvents, CommandID: id, After: after})
	if err != nil {
		return nil, err
	}
	s := &EventStream{c: c, conn: conn, r: r}
	s.stop = context.AfterFunc(ctx, func() { conn.Close() })
	return s, nil
}

// EventStream is one command's events in seq order.
type EventStream struct {
	c    *Client
	conn net.Conn
	r    *bufio.Reader
	stop func() bool
	done bool
}

// Next returns the next event; after the terminal event it returns io.EOF.
// A connection that breaks before the terminal event is an error, and the
// caller resumes with Events after the last seq it saw.
func (s *EventStream) Next() (*bothy.Event, error) {
	if s.done {
		return nil, io.EOF
	}
	line, err := s.r.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read event: %w", err)
	}
	var e bothy.Event
	if err := json.Unmarshal(line, &e); err != nil {
		return nil, fmt.Errorf("decode event: %w", err)
	}
	if terminalEvent(&e) {
		s.done = true
		s.Close()
	}
	return &e, nil
}

// Close ends the stream.
func (s *EventStream) Close() error {
	s.stop()
	s.c.forget(s.conn)
	return nil
}

func terminalEvent(e *bothy.Event) bool {
	return e.Kind == bothy.EventExit || e.Kind == bothy.EventState
}

// execSpec returns the ExecSpec of s, whose Env holds s.Env and s.Secrets.
func (s *RunSpec) execSpec() (bothy.ExecSpec, error) {
	spec := bothy.ExecSpec{Argv: s.Argv, Script: s.Script, Cwd: s.Cwd, Timeout: time.Duration(s.TimeoutMS) * time.Millisecond, Limits: s.Limits}
	if len(s.Stdin) > MaxStdin {
		return spec, bothy.Errorf(bothy.ETOOLARGE, "stdin is over %d bytes", MaxStdin)
	} else if s.TimeoutMS < 0 {
		return spec, bothy.Errorf(bothy.EINVALID, "timeout must not be negative")
	}
	spec.Env = make(map[string]string, len(s.Env)+len(s.Secrets)+1)
	for k, v := range s.Env {
		spec.Env[k] = v
	}
	// Secrets join the environment; secret files name theirs in it. A
	// variable may be set once only.
	for i, m := range []map[string]string{s.Secrets, s.SecretFiles} {
		for k, v := range m {
			if _, ok := spec.Env[k]; ok {
				return spec, bothy.Errorf(bothy.EINVALID, "environment variable %s is set twice (by env, a secret or a secret file)", k)
			} else if len(v) > 0 && len(v) < redact.MinValueBytes {
				return spec, bothy.Errorf(bothy.EINVALID, "secret %s is shorter than %d bytes: too short to redact from output", k, redact.MinValueBytes)
			}
			if i == 0 {
				spec.Env[k] = v
			}
		}
	}
	spec.SecretFiles = s.SecretFiles
	return spec, spec.Validate()
}

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

	"github.com/bothyhq/bothy"
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

// Request is one request line. Which fields matter depends on Op.
type Request struct {
	Op        string `json:"op"`
	CommandID string `json:"command_id,omitempty"`
	// RunSpec is the command of an OpRun. Its accept record journals all
	// of it but the secrets: the supervisor adds them to the command's
	// environment for Provider.Exec and writes them to no file (not the
	// accept record, not its log), and it redacts their values, and
	// common encodings of them (see package redact), from the command's
	// output before journaling it. A secret's value must be, unless
	// empty, at least redact.MinValueBytes long.
	bothy.RunSpec
	After int64 `json:"after,omitempty"` // OpEvents: stream events with seq > After
	Seq   int64 `json:"seq,omitempty"`   // OpAck: the highest seq received
	// DiskLimited (OpCancel) cancels the command for the scratch limit:
	// its exit says disk_limited, not cancelled.
	DiskLimited bool `json:"disk_limited,omitempty"`
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
	// State is one of the bothy.Run* states.
	State string `json:"state"`
	// Existing is set on a Run whose command id was already journaled: it
	// returned the existing command and started nothing.
	Existing  bool         `json:"existing,omitempty"`
	LastSeq   int64        `json:"last_seq"`
	AckedSeq  int64        `json:"acked_seq"`
	Truncated bool         `json:"truncated,omitempty"`
	Exit      *bothy.Exit  `json:"exit,omitempty"`
	Error     *bothy.Error `json:"error,omitempty"`
}

// FinalState is the fields of a terminal state event: State is
// bothy.RunFailed, with Error, or bothy.RunLost, with Reason.
type FinalState struct {
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

// Ping checks that the supervisor answers on its socket (a hello).
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.call(ctx, &Request{Op: OpHello})
	return err
}

// Run starts a command once. If id was already journaled it starts
// nothing and returns the existing command's status with Existing set.
// When Run returns without error the command's accept record is on disk.
func (c *Client) Run(ctx context.Context, id string, spec bothy.RunSpec) (*Status, error) {
	// Checked before sending too: JSON would silently replace invalid
	// UTF-8 in a secret, which would then be neither right in the
	// environment nor redacted.
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	resp, err := c.call(ctx, &Request{Op: OpRun, CommandID: id, RunSpec: spec})
	if err != nil {
		return nil, err
	}
	return resp.Status, nil
}

// Status returns a command's status; an unknown id is bothy.RunNeverSeen.
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

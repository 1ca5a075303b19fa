package http

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	nethttp "net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bothyhq/bothy"
)

// Limits of an EventStream.
const (
	// streamRetries is how many times in a row a stream reconnects after a
	// broken connection before Next gives up.
	streamRetries = 5
	// maxEventLine bounds one line of the stream: an event holds at most
	// 1 MiB of data, which base64 and JSON grow by a third.
	maxEventLine = 4 << 20
)

// EventStream reads a command's events from the server-sent event stream
// of GET /v1/commands/{id}/events. When the connection breaks before the
// end, Next reconnects with after set to the last seq it returned, so
// every event is returned once, in order (unless Raw is set). It is not
// safe for concurrent use, except Close.
type EventStream struct {
	// Raw, set before the first Next, makes Next return the events as the
	// server sent them: an event whose seq is not above the last one is
	// returned, not dropped, and a broken connection ends the stream with
	// its error instead of reconnecting. Tests of the server's
	// exactly-once delivery set it, since by default the stream hides
	// what they check.
	Raw bool

	c      *Client
	ctx    context.Context
	cancel context.CancelFunc
	id     string
	after  int64
	body   io.ReadCloser
	r      *bufio.Reader
	final  *bothy.Command
	err    error // sticky: io.EOF after the end
	closed atomic.Bool
}

// Events opens the event stream of a command, starting after seq after (0
// for the first event). The caller closes the stream.
func (c *Client) Events(ctx context.Context, commandID string, after int64) (*EventStream, error) {
	if after < 0 {
		return nil, bothy.Errorf(bothy.EINVALID, "after must not be negative")
	}
	s := &EventStream{c: c, id: commandID, after: after}
	s.ctx, s.cancel = context.WithCancel(ctx)
	if err := s.connect(); err != nil {
		s.cancel()
		return nil, err
	}
	return s, nil
}

// connect opens the stream after s.after.
func (s *EventStream) connect() error {
	q := url.Values{"after": {strconv.FormatInt(s.after, 10)}}
	h := nethttp.Header{"Accept": {"text/event-stream"}}
	resp, err := s.c.do(s.ctx, request{method: "GET", path: commandPath(s.id, "/events"), query: q, header: h})
	if err != nil {
		return err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return bothy.Errorf(bothy.EINTERNAL, "events of %s: response is %q, not an event stream", s.id, ct)
	}
	s.body, s.r = resp.Body, bufio.NewReaderSize(resp.Body, 64<<10)
	return nil
}

// Next returns the next event. After the stream's end event it returns
// io.EOF, and Command returns the final command. An error event from the
// server is returned as its *bothy.Error. Errors are sticky.
func (s *EventStream) Next() (*bothy.Event, error) {
	for tries := 0; s.err == nil; {
		if s.closed.Load() {
			s.fail(errors.New("event stream closed"))
			break
		}
		if s.body == nil {
			if err := s.connect(); err != nil {
				if s.retry(err, &tries) {
					continue
				}
				s.fail(err)
				break
			}
		}
		m, err := readMessage(s.r)
		if err != nil {
			s.body.Close()
			s.body = nil
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("events of %s: %w: the stream ended before its end event", s.id, io.ErrUnexpectedEOF)
			}
			if !s.Raw && s.retry(err, &tries) {
				continue
			}
			s.fail(err)
			break
		}
		switch m.event {
		case "end":
			var cmd bothy.Command
			if err := json.Unmarshal(m.data, &cmd); err != nil {
				s.fail(fmt.Errorf("events of %s: decode end: %w", s.id, err))
				break
			}
			s.final = &cmd
			s.fail(io.EOF)
		case "error":
			var e errorResponse
			if err := json.Unmarshal(m.data, &e); err != nil || e.Error.Code == "" {
				s.fail(bothy.Errorf(bothy.EINTERNAL, "events of %s: undecodable error event", s.id))
				break
			}
			s.fail(&bothy.Error{Code: e.Error.Code, Message: e.Error.Message})
		default:
			var e bothy.Event
			if err := json.Unmarshal(m.data, &e); err != nil {
				s.fail(fmt.Errorf("events of %s: decode event: %w", s.id, err))
				break
			}
			if e.Seq <= s.after {
				if s.Raw {
					return &e, nil
				}
				continue // a server re-sent what this stream returned
			}
			s.after = e.Seq
			return &e, nil
		}
	}
	return nil, s.err
}

// retry reports whether Next should reconnect after err, and waits before
// it does: a broken connection or an unavailable server is retried, an
// answer such as not_found is not.
func (s *EventStream) retry(err error, tries *int) bool {
	var be *bothy.Error
	if s.ctx.Err() != nil || *tries >= streamRetries ||
		errors.As(err, &be) && be.Code != bothy.EUNAVAILABLE && be.Code != bothy.EINTERNAL {
		return false
	}
	*tries++
	t := time.NewTimer(min(100*time.Millisecond<<(*tries-1), 2*time.Second))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// fail ends the stream with err, or with the context's error if the caller
// cancelled.
func (s *EventStream) fail(err error) {
	if s.ctx.Err() != nil && err != io.EOF {
		err = s.ctx.Err()
	}
	s.err = err
	if s.body != nil {
		s.body.Close()
		s.body = nil
	}
	s.cancel()
}

// Command returns the final command after Next returned io.EOF, else nil.
func (s *EventStream) Command() *bothy.Command { return s.final }

// After returns the seq of the last event Next returned (or the starting
// seq): where a new stream would resume.
func (s *EventStream) After() int64 { return s.after }

// Close ends the stream; a Next blocked in another goroutine returns.
func (s *EventStream) Close() error {
	s.closed.Store(true)
	s.cancel()
	return nil
}

// message is one server-sent event.
type message struct {
	id, event string
	data      []byte
}

// readMessage reads the next event of an event stream, following the
// WHATWG parsing rules bothy's server needs: "field: value" lines, several
// data lines joined by newlines, ':' comments, and blocks without data
// (keepalives) skipped.
func readMessage(r *bufio.Reader) (*message, error) {
	var m message
	var data bytes.Buffer
	hasData := false
	for {
		line, err := readLine(r)
		if err != nil {
			return nil, err
		}
		if line == "" {
			if !hasData {
				m = message{}
				continue
			}
			m.data = bytes.TrimSuffix(data.Bytes(), []byte("\n"))
			return &m, nil
		} else if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			data.WriteString(value)
			data.WriteByte('\n')
			hasData = true
		case "event":
			m.event = value
		case "id":
			if !strings.Contains(value, "\x00") {
				m.id = value
			}
		}
	}
}

// readLine reads a line of at most maxEventLine bytes without its "\n" or
// "\r\n". A last line without a newline is io.EOF: the event it belongs to
// never completed.
func readLine(r *bufio.Reader) (string, error) {
	var line []byte
	for {
		b, err := r.ReadSlice('\n')
		if len(line)+len(b) > maxEventLine {
			return "", bothy.Errorf(bothy.ETOOLARGE, "event stream line over %d bytes", maxEventLine)
		}
		line = append(line, b...)
		if err == bufio.ErrBufferFull {
			continue
		} else if err != nil {
			return "", err
		}
		line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
		return string(line), nil
	}
}

package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	nethttp "net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
)

// stream reads a command's events (GET /v1/commands/{id}/events?after=N)
// with a reader of its own, which keeps every event it receives: the Go
// client drops a seq it has seen, which would hide a duplicate. It
// reconnects after the last seq received whenever the stream breaks (serve
// killed, restarted on another port), until the end event.
type stream struct {
	id string

	mu     sync.Mutex
	events []bothy.Event // every event received, in order, duplicates too
	errs   []string      // error events received
	final  *bothy.Command
	done   chan struct{}
}

// follow starts reading command id's events until its end event or the end
// of the test.
func (n *node) follow(id string) *stream {
	s := &stream{id: id, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	n.t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		defer close(s.done)
		for ctx.Err() == nil {
			if s.read(ctx, n) {
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return s
}

// last returns the highest seq received.
func (s *stream) last() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last int64
	for _, e := range s.events {
		last = max(last, e.Seq)
	}
	return last
}

// read reads one connection of the stream; it reports whether the end
// event came.
func (s *stream) read(ctx context.Context, n *node) bool {
	url, token := n.endpoint()
	req, err := nethttp.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/commands/%s/events?after=%d", url, s.id, s.last()), nil)
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := nethttp.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return false
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	var kind, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if s.deliver(kind, data) {
				return true
			}
			kind, data = "", ""
		case strings.HasPrefix(line, "event: "):
			kind = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data += line[len("data: "):]
		}
	}
	return false
}

// deliver records one event of the stream; it reports whether it was the
// end event.
func (s *stream) deliver(kind, data string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch kind {
	case "":
		return false
	case "end":
		var c bothy.Command
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			s.errs = append(s.errs, fmt.Sprintf("end event %q: %v", data, err))
			return false
		}
		s.final = &c
		return true
	case "error":
		s.errs = append(s.errs, data)
		return false
	}
	var e bothy.Event
	if err := json.Unmarshal([]byte(data), &e); err != nil || e.Kind != kind {
		s.errs = append(s.errs, fmt.Sprintf("%s event %q: %v", kind, data, err))
		return false
	}
	s.events = append(s.events, e)
	return false
}

// waitFor waits until cond holds of the events received so far, within d.
func (s *stream) waitFor(t *testing.T, what string, d time.Duration, cond func([]bothy.Event) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		s.mu.Lock()
		ok := cond(s.events)
		s.mu.Unlock()
		if ok {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("command %s: no %s within %v", s.id, what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// seqAtLeast is a waitFor condition: an event with seq n or later.
func seqAtLeast(n int64) func([]bothy.Event) bool {
	return func(es []bothy.Event) bool { return len(es) > 0 && es[len(es)-1].Seq >= n }
}

// exited is a waitFor condition: the exit event.
func exited(es []bothy.Event) bool { return len(es) > 0 && es[len(es)-1].Kind == bothy.EventExit }

// check waits, within d, for the stream's end event, and checks that it
// received every event of command c (seqs 1 … c.LastSeq) exactly once and
// in order, and that its end names c's state. It returns the stdout.
func (s *stream) check(t *testing.T, c bothy.Command, d time.Duration) string {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(d):
		t.Errorf("command %s: the event stream did not end within %v of the command (%s)", s.id, d, c.State)
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// An error event may say the server cannot answer now (unavailable,
	// insufficient_storage), after which the reader resumes; an internal
	// error is what a 500 is to a request.
	for _, e := range s.errs {
		if strings.Contains(e, `"code":"internal"`) || !strings.Contains(e, `"code":`) {
			t.Errorf("command %s: the event stream failed with %s", s.id, e)
		} else {
			t.Logf("command %s: stream error %s", s.id, e)
		}
	}
	if s.final == nil {
		t.Errorf("command %s: the stream ended without its end event", s.id)
		return ""
	} else if s.final.State != c.State || s.final.LastSeq != c.LastSeq {
		t.Errorf("command %s: the end event says %s at seq %d, the command %s at seq %d", s.id, s.final.State, s.final.LastSeq, c.State, c.LastSeq)
	}
	seen := map[int64]int{}
	var out strings.Builder
	for i, e := range s.events {
		seen[e.Seq]++
		if seen[e.Seq] > 1 {
			t.Errorf("command %s: seq %d received %d times", s.id, e.Seq, seen[e.Seq])
		} else if e.Seq != int64(i+1) {
			t.Errorf("command %s: event %d of the stream has seq %d, want %d (out of order or a gap)", s.id, i+1, e.Seq, i+1)
		}
		if e.Kind == bothy.EventStdout && seen[e.Seq] == 1 {
			out.Write(e.Data)
		}
	}
	for seq := int64(1); seq <= c.LastSeq; seq++ {
		if seen[seq] == 0 {
			t.Errorf("command %s: seq %d never received (last_seq %d)", s.id, seq, c.LastSeq)
		}
	}
	if int64(len(seen)) != c.LastSeq {
		t.Errorf("command %s: %d distinct seqs received, last_seq is %d", s.id, len(seen), c.LastSeq)
	}
	return out.String()
}

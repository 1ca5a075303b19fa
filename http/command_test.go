package http_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	nethttp "net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/computetest"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/storetest"
)

// mustRun runs argv on the computer through the client.
func mustRun(t *testing.T, c *bhttp.Client, computerID string, req bothy.RunRequest) *bothy.Command {
	t.Helper()
	if req.Argv == nil && req.Script == "" {
		req.Argv = []string{"true"}
	}
	cmd, err := c.RunCommand(t.Context(), computerID, req)
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// drain reads a stream to its end and returns the seqs and the data of its
// events, and the final command.
func drain(t *testing.T, s *bhttp.EventStream) ([]int64, string, *bothy.Command) {
	t.Helper()
	var seqs []int64
	var data strings.Builder
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return seqs, data.String(), s.Command()
		} else if err != nil {
			t.Fatalf("Next after %v: %v", seqs, err)
		}
		seqs = append(seqs, ev.Seq)
		data.Write(ev.Data)
	}
}

func TestCommands_Run(t *testing.T) {
	e := newComputeEnv(t)
	c := mustCreate(t, e.acme, bhttp.CreateComputerRequest{})
	path := "/v1/computers/" + c.ID + "/commands"

	t.Run("IdempotencyKey", func(t *testing.T) {
		body := `{"argv":["echo","hi"],"stdin":"in","env":{"A":"secret"},"idempotency_key":"k1"}`
		r := e.raw(t, "POST", path, e.acmeToken, strings.NewReader(body))
		r.want(t, 201, "")
		var first bothy.Command
		if err := json.Unmarshal(r.body, &first); err != nil {
			t.Fatal(err)
		}
		if first.State != bothy.CommandRunning || first.ComputerID != c.ID || !slices.Equal(first.EnvNames, []string{"A"}) ||
			strings.Contains(string(r.body), "secret") || !strings.Contains(string(r.body), `"exit_code":null`) {
			t.Errorf("created command: %s", r.body)
		}
		r = e.raw(t, "POST", path, e.acmeToken, strings.NewReader(`{"argv":["other"],"idempotency_key":"k1"}`))
		r.want(t, 200, "")
		var again bothy.Command
		json.Unmarshal(r.body, &again)
		if again.ID != first.ID || !slices.Equal(again.Argv, []string{"echo", "hi"}) {
			t.Errorf("same key gave %s, want command %s", r.body, first.ID)
		}
		if stdin := e.compute.Stdin(first.ID); stdin != "in" {
			t.Errorf("stdin %q reached the compute service", stdin)
		}
		if a, b := mustRun(t, e.acme, c.ID, bothy.RunRequest{}), mustRun(t, e.acme, c.ID, bothy.RunRequest{}); a.ID == b.ID {
			t.Errorf("two runs without a key gave one command %s", a.ID)
		}
	})
	t.Run("Wait", func(t *testing.T) {
		cmd := mustRun(t, e.acme, c.ID, bothy.RunRequest{IdempotencyKey: "wait"})
		done := make(chan *response, 1)
		go func() {
			// The key names the existing command, which the request waits for.
			done <- e.raw(t, "POST", path, e.acmeToken, strings.NewReader(`{"argv":["x"],"idempotency_key":"wait","wait":true}`))
		}()
		if id := <-e.compute.Waiting(); id != cmd.ID {
			t.Fatalf("waited for %s, want %s", id, cmd.ID)
		}
		e.compute.Finish(t, "acme", cmd.ID, bothy.CommandCompleted, 3)
		r := <-done
		r.want(t, 200, "")
		var got bothy.Command
		json.Unmarshal(r.body, &got)
		if got.State != bothy.CommandCompleted || got.ExitCode == nil || *got.ExitCode != 3 {
			t.Errorf("wait answered %s", r.body)
		}
		// A new command with wait answers 200, not 201, once it ends.
		go func() {
			done <- e.raw(t, "POST", path, e.acmeToken, strings.NewReader(`{"script":"exit 0","wait":true}`))
		}()
		id := <-e.compute.Waiting()
		e.compute.Finish(t, "acme", id, bothy.CommandFailed, 0)
		(<-done).want(t, 200, "")
	})
	t.Run("ErrTooLarge", func(t *testing.T) {
		big, _ := json.Marshal(bothy.RunRequest{Argv: []string{"cat"}, Stdin: strings.Repeat("x", bothy.MaxStdinBytes+1)})
		e.raw(t, "POST", path, e.acmeToken, strings.NewReader(string(big))).want(t, 413, bothy.ETOOLARGE)
		_, err := e.acme.RunCommand(t.Context(), c.ID, bothy.RunRequest{Argv: []string{"cat"}, Stdin: strings.Repeat("\x01", bothy.MaxStdinBytes+1)})
		storetest.WantCode(t, err, bothy.ETOOLARGE)
		// Exactly the limit is fine, however much JSON escaping grows it.
		mustRun(t, e.acme, c.ID, bothy.RunRequest{Argv: []string{"cat"}, Stdin: strings.Repeat("\x01", bothy.MaxStdinBytes)})
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		e.raw(t, "POST", path, e.acmeToken, strings.NewReader(`{}`)).want(t, 400, bothy.EINVALID)
		e.raw(t, "POST", path, e.acmeToken, strings.NewReader(`{"argv":["a"],"script":"b"}`)).want(t, 400, bothy.EINVALID)
		e.raw(t, "POST", path, e.acmeToken, strings.NewReader(`{"argv":["a"],"stdn":"b"}`)).want(t, 400, bothy.EINVALID)
		// A missing command is not found before its query is read.
		e.raw(t, "GET", "/v1/commands/nope/events?after=-1", e.acmeToken, nil).want(t, 404, bothy.ENOTFOUND)
		cmd := mustRun(t, e.acme, c.ID, bothy.RunRequest{})
		e.raw(t, "GET", "/v1/commands/"+cmd.ID+"/events?after=-1", e.acmeToken, nil).want(t, 400, bothy.EINVALID)
		e.raw(t, "GET", path+"?state=sleeping", e.acmeToken, nil).want(t, 400, bothy.EINVALID)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := e.acme.RunCommand(t.Context(), "cmp_missing", bothy.RunRequest{Argv: []string{"true"}})
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.acme.GetCommand(t.Context(), "cmd_missing")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.acme.ListCommands(t.Context(), bothy.CommandFilter{ComputerID: "cmp_missing"})
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
	t.Run("List", func(t *testing.T) {
		c2 := mustCreate(t, e.acme, bhttp.CreateComputerRequest{})
		a := mustRun(t, e.acme, c2.ID, bothy.RunRequest{})
		b := mustRun(t, e.acme, c2.ID, bothy.RunRequest{})
		cmds, err := e.acme.ListCommands(t.Context(), bothy.CommandFilter{ComputerID: c2.ID})
		if err != nil || len(cmds) != 2 || cmds[0].ID != a.ID || cmds[1].ID != b.ID {
			t.Fatalf("ListCommands = %v, %v; want [%s %s]", cmds, err, a.ID, b.ID)
		}
		cmds, err = e.acme.ListCommands(t.Context(), bothy.CommandFilter{ComputerID: c2.ID, Offset: 1, Limit: 5})
		if err != nil || len(cmds) != 1 || cmds[0].ID != b.ID {
			t.Fatalf("ListCommands offset 1 = %v, %v", cmds, err)
		}
		e.raw(t, "GET", "/v1/computers/"+c.ID+"/commands?state=completed", e.acmeToken, nil).want(t, 200, "")
		got, err := e.acme.GetCommand(t.Context(), a.ID)
		if err != nil || got.ID != a.ID || got.State != bothy.CommandRunning {
			t.Fatalf("GetCommand = %+v, %v", got, err)
		}
	})
	t.Run("Cancel", func(t *testing.T) {
		cmd := mustRun(t, e.acme, c.ID, bothy.RunRequest{})
		got, err := e.acme.CancelCommand(t.Context(), cmd.ID)
		if err != nil || got.State != bothy.CommandCancelled || !e.compute.Called("cancel "+cmd.ID) {
			t.Fatalf("CancelCommand = %+v, %v", got, err)
		}
		if got, err := e.acme.WaitCommand(t.Context(), cmd.ID); err != nil || got.State != bothy.CommandCancelled {
			t.Fatalf("WaitCommand after cancel = %+v, %v", got, err)
		}
	})
	t.Run("Checkpoint", func(t *testing.T) {
		c := mustCreate(t, e.acme, bhttp.CreateComputerRequest{})
		if _, err := e.acme.WriteFile(t.Context(), "", c.ID, "a.txt", strings.NewReader("a"), bothy.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		rev, err := e.acme.Checkpoint(t.Context(), c.ID)
		if err != nil || rev.Number != 1 || rev.ComputerID != c.ID || !e.compute.Called("checkpoint "+c.ID) {
			t.Fatalf("Checkpoint = %+v, %v", rev, err)
		}
	})
	t.Run("StopDestroy", func(t *testing.T) {
		c2 := mustCreate(t, e.acme, bhttp.CreateComputerRequest{})
		if _, err := e.acme.StopComputer(t.Context(), c2.ID); err != nil || !e.compute.Called("stop "+c2.ID) {
			t.Fatalf("StopComputer: %v; calls %v", err, e.compute.Calls())
		}
		got, err := e.acme.DestroyComputer(t.Context(), c2.ID)
		if err != nil || got.State != bothy.StateDestroyed || !e.compute.Called("destroy "+c2.ID) {
			t.Fatalf("DestroyComputer = %+v, %v", got, err)
		}
		_, err = e.acme.RunCommand(t.Context(), c2.ID, bothy.RunRequest{Argv: []string{"true"}})
		storetest.WantCode(t, err, bothy.ECONFLICT)
	})
	t.Run("ErrForbidden", func(t *testing.T) {
		cmd := mustRun(t, e.acme, c.ID, bothy.RunRequest{})
		_, err := e.ro.RunCommand(t.Context(), c.ID, bothy.RunRequest{Argv: []string{"true"}})
		storetest.WantCode(t, err, bothy.EFORBIDDEN)
		_, err = e.ro.CancelCommand(t.Context(), cmd.ID)
		storetest.WantCode(t, err, bothy.EFORBIDDEN)
		_, err = e.ro.Checkpoint(t.Context(), c.ID)
		storetest.WantCode(t, err, bothy.EFORBIDDEN)
		// Reading commands and their events needs only computers:read.
		if _, err := e.ro.GetCommand(t.Context(), cmd.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ro.ListCommands(t.Context(), bothy.CommandFilter{ComputerID: c.ID}); err != nil {
			t.Fatal(err)
		}
		e.compute.Finish(t, "acme", cmd.ID, bothy.CommandCompleted, 0)
		s, err := e.ro.Events(t.Context(), cmd.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		drain(t, s)
	})
	t.Run("TenantIsolation", func(t *testing.T) {
		cmd := mustRun(t, e.acme, c.ID, bothy.RunRequest{})
		e.compute.Emit(t, "acme", cmd.ID, out(bothy.EventStdout, "private"))
		_, err := e.other.GetCommand(t.Context(), cmd.ID)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.other.Events(t.Context(), cmd.ID, 0)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.other.CancelCommand(t.Context(), cmd.ID)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.other.RunCommand(t.Context(), c.ID, bothy.RunRequest{Argv: []string{"true"}})
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.other.ListCommands(t.Context(), bothy.CommandFilter{ComputerID: c.ID})
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.other.Checkpoint(t.Context(), c.ID)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		e.raw(t, "GET", "/v1/commands/"+cmd.ID+"/events", e.token(t, "other", bothy.ScopeComputersRead), nil).want(t, 404, bothy.ENOTFOUND)
	})
}

func TestCommands_Events(t *testing.T) {
	e := newComputeEnv(t)
	c := mustCreate(t, e.acme, bhttp.CreateComputerRequest{})

	t.Run("Resume", func(t *testing.T) {
		cmd := mustRun(t, e.acme, c.ID, bothy.RunRequest{})
		for i := 1; i <= 5; i++ {
			e.compute.Emit(t, "acme", cmd.ID, out(bothy.EventStdout, fmt.Sprint(i)))
		}
		final := e.compute.Finish(t, "acme", cmd.ID, bothy.CommandCompleted, 0)
		s, err := e.acme.Events(t.Context(), cmd.ID, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		seqs, data, end := drain(t, s)
		if !slices.Equal(seqs, []int64{3, 4, 5}) || data != "345" {
			t.Errorf("after 2: seqs %v data %q", seqs, data)
		}
		if end == nil || end.ID != cmd.ID || end.State != bothy.CommandCompleted || end.LastSeq != final.LastSeq {
			t.Errorf("final command %+v", end)
		}
		if _, err := s.Next(); err != io.EOF {
			t.Errorf("Next after the end: %v, want io.EOF", err)
		}

		// Last-Event-ID stands for after when the query lacks it.
		r := e.raw(t, "GET", "/v1/commands/"+cmd.ID+"/events", e.acmeToken, nil, "Last-Event-ID", "3")
		r.want(t, 200, "")
		if ct := r.header.Get("Content-Type"); ct != "text/event-stream" || r.header.Get("Cache-Control") != "no-cache" || r.header.Get("X-Accel-Buffering") != "no" {
			t.Errorf("headers %v", r.header)
		}
		body := string(r.body)
		if !strings.HasPrefix(body, "id: 4\nevent: stdout\ndata: {") || !strings.Contains(body, "\n\nid: 5\nevent: stdout\ndata: ") ||
			!strings.Contains(body, "\n\nevent: end\ndata: {\"id\":\""+cmd.ID+"\"") || !strings.HasSuffix(body, "}\n\n") || strings.Contains(body, "id: 3\n") {
			t.Errorf("stream after Last-Event-ID 3:\n%s", body)
		}
		// The query wins over the header.
		r = e.raw(t, "GET", "/v1/commands/"+cmd.ID+"/events?after=4", e.acmeToken, nil, "Last-Event-ID", "1")
		if !strings.HasPrefix(string(r.body), "id: 5\n") {
			t.Errorf("stream after=4 with Last-Event-ID 1:\n%s", r.body)
		}
		// After the last event, only the end.
		r = e.raw(t, "GET", "/v1/commands/"+cmd.ID+"/events?after=99", e.acmeToken, nil)
		if !strings.HasPrefix(string(r.body), "event: end\n") {
			t.Errorf("stream after=99:\n%s", r.body)
		}
	})
	t.Run("Live", func(t *testing.T) {
		cmd := mustRun(t, e.acme, c.ID, bothy.RunRequest{})
		s, err := e.acme.Events(t.Context(), cmd.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// Each event reaches the open stream; a batch of 200 crosses batches.
		for i := 1; i <= 3; i++ {
			e.compute.Emit(t, "acme", cmd.ID, out(bothy.EventStderr, fmt.Sprint(i)))
			ev, err := s.Next()
			if err != nil || ev.Seq != int64(i) || ev.Kind != bothy.EventStderr || string(ev.Data) != fmt.Sprint(i) {
				t.Fatalf("Next = %+v, %v; want stderr event %d", ev, err, i)
			}
		}
		var batch []bothy.Event
		for range 200 {
			batch = append(batch, out(bothy.EventStdout, "x"))
		}
		e.compute.Emit(t, "acme", cmd.ID, batch...)
		e.compute.Finish(t, "acme", cmd.ID, bothy.CommandCompleted, 7)
		seqs, _, end := drain(t, s)
		if len(seqs) != 200 || seqs[0] != 4 || seqs[199] != 203 || end == nil || *end.ExitCode != 7 {
			t.Fatalf("got %d events %v…, end %+v", len(seqs), seqs[:min(3, len(seqs))], end)
		}
		if s.After() != 203 {
			t.Errorf("After = %d", s.After())
		}
	})
	t.Run("WaitCommand", func(t *testing.T) {
		cmd := mustRun(t, e.acme, c.ID, bothy.RunRequest{})
		e.compute.Emit(t, "acme", cmd.ID, out(bothy.EventStdout, "before"))
		done := make(chan *bothy.Command, 1)
		go func() {
			got, err := e.acme.WaitCommand(t.Context(), cmd.ID)
			if err != nil {
				t.Error(err)
			}
			done <- got
		}()
		e.compute.Emit(t, "acme", cmd.ID, out(bothy.EventStdout, "after"))
		e.compute.Finish(t, "acme", cmd.ID, bothy.CommandTimedOut, 0)
		if got := <-done; got == nil || got.State != bothy.CommandTimedOut {
			t.Fatalf("WaitCommand = %+v", got)
		}
	})
}

// TestCommands_NoCompute checks a server without a ComputeService: the
// command routes that need one are 503, reads and stored events work.
func TestCommands_NoCompute(t *testing.T) {
	e := newEnv(t, openSQLite)
	c := mustCreate(t, e.acme, bhttp.CreateComputerRequest{})
	_, err := e.acme.RunCommand(t.Context(), c.ID, bothy.RunRequest{Argv: []string{"true"}})
	storetest.WantCode(t, err, bothy.EUNAVAILABLE)
	e.raw(t, "POST", "/v1/computers/"+c.ID+"/checkpoint", e.acmeToken, nil).want(t, 503, bothy.EUNAVAILABLE)

	cmd := &bothy.Command{ID: "cmd_stored", TenantID: "acme", ComputerID: c.ID, Argv: []string{"true"}}
	if _, err := e.store.CreateCommand(t.Context(), cmd); err != nil {
		t.Fatal(err)
	}
	if err := e.store.AppendEvents(t.Context(), "acme", cmd.ID, 0, []bothy.Event{out(bothy.EventStdout, "a")}); err != nil {
		t.Fatal(err)
	}
	_, err = e.acme.CancelCommand(t.Context(), cmd.ID)
	storetest.WantCode(t, err, bothy.EUNAVAILABLE)
	// An unfinished command's stream holds the stored events and no end.
	r := e.raw(t, "GET", "/v1/commands/"+cmd.ID+"/events", e.acmeToken, nil)
	if body := string(r.body); r.status != 200 || !strings.HasPrefix(body, "id: 1\n") || strings.Contains(body, "event: end") {
		t.Errorf("stream of an admitted command: %d\n%s", r.status, body)
	}
	if _, err := e.store.TransitionCommand(t.Context(), "acme", cmd.ID, []string{bothy.CommandAdmitted}, bothy.CommandFailed, bothy.CommandUpdate{}); err != nil {
		t.Fatal(err)
	}
	s, err := e.acme.Events(t.Context(), cmd.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if seqs, data, end := drain(t, s); !slices.Equal(seqs, []int64{1}) || data != "a" || end.State != bothy.CommandFailed {
		t.Errorf("stream of a failed command: %v %q %+v", seqs, data, end)
	}
	// Stop and destroy change only the stored computer.
	if got, err := e.acme.StopComputer(t.Context(), c.ID); err != nil || got.State != bothy.StateCold {
		t.Fatalf("StopComputer = %+v, %v", got, err)
	}
	if got, err := e.acme.DestroyComputer(t.Context(), c.ID); err != nil || got.State != bothy.StateDestroyed {
		t.Fatalf("DestroyComputer = %+v, %v", got, err)
	}
}

// countingStore counts ListEvents calls.
type countingStore struct {
	bothy.Store
	lists atomic.Int64
}

func (s *countingStore) ListEvents(ctx context.Context, tenantID, commandID string, after int64, limit int) ([]*bothy.Event, error) {
	s.lists.Add(1)
	return s.Store.ListEvents(ctx, tenantID, commandID, after, limit)
}

// blockingWriter is a ResponseWriter whose writes block once budget bytes
// are written, as a socket does when its reader stops reading: blocked is
// closed then, and writes go on once release is closed.
type blockingWriter struct {
	header  nethttp.Header
	mu      sync.Mutex
	budget  int
	body    strings.Builder
	blocked chan struct{}
	release chan struct{}
	once    sync.Once
}

func (w *blockingWriter) Header() nethttp.Header { return w.header }
func (w *blockingWriter) WriteHeader(int)        {}
func (w *blockingWriter) Flush()                 {}

func (w *blockingWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	over := w.body.Len()+len(b) > w.budget
	w.mu.Unlock()
	if over {
		w.once.Do(func() { close(w.blocked) })
		<-w.release
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(b)
}

// TestCommands_SlowReader checks that a stream whose reader stops reading
// holds the server at one batch of events: it reads no further ahead.
func TestCommands_SlowReader(t *testing.T) {
	store, _ := openSQLite(t)
	cs := &countingStore{Store: store}
	fake := computetest.NewFake(store)
	srv := bhttp.NewServer(cs, nil, bhttp.Options{Compute: fake})
	if err := store.CreateTenant(t.Context(), &bothy.Tenant{ID: "acme", HashKey: make([]byte, 32)}); err != nil {
		t.Fatal(err)
	}
	_, token, err := store.CreateToken(t.Context(), "acme", "tester", []string{bothy.ScopeComputersRead}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateComputer(t.Context(), &bothy.Computer{ID: "cmp_slow", TenantID: "acme", Owner: "tester", Profile: "standard", State: bothy.StateCold}); err != nil {
		t.Fatal(err)
	}
	cmd, _, err := fake.RunCommand(t.Context(), "acme", "cmp_slow", bothy.RunRequest{Argv: []string{"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	var evs []bothy.Event
	for range 1000 {
		evs = append(evs, out(bothy.EventStdout, strings.Repeat("y", 100)))
	}
	fake.Emit(t, "acme", cmd.ID, evs...)
	fake.Finish(t, "acme", cmd.ID, bothy.CommandCompleted, 0)

	// The reader takes one and a half batches of 64 events, then stops.
	first, err := store.ListEvents(t.Context(), "acme", cmd.ID, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	size, _ := json.Marshal(first[0])
	budget := 96 * (len(size) + len("id: 1000\nevent: stdout\ndata: \n\n"))
	w := &blockingWriter{header: nethttp.Header{}, budget: budget, blocked: make(chan struct{}), release: make(chan struct{})}
	req := httptest.NewRequestWithContext(t.Context(), "GET", "/v1/commands/"+cmd.ID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ServeHTTP(w, req)
	}()
	<-w.blocked
	if n := cs.lists.Load(); n != 2 {
		t.Errorf("the handler listed %d batches while its reader stalled in the second; want 2", n)
	}
	close(w.release)
	<-done
	var seqs int
	sc := bufio.NewScanner(strings.NewReader(w.body.String()))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "id: ") {
			seqs++
		}
	}
	if seqs != 1000 || !strings.Contains(w.body.String(), "event: end\n") {
		t.Errorf("stream held %d events", seqs)
	}
}

// sseServer serves handcrafted event streams: each request gets the next
// of bodies, and the after it asked for is recorded.
func sseServer(t *testing.T, bodies ...string) (*bhttp.Client, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var afters []string
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		mu.Lock()
		i := len(afters)
		afters = append(afters, r.URL.Query().Get("after"))
		mu.Unlock()
		if i >= len(bodies) {
			nethttp.Error(w, `{"error":{"code":"not_found","message":"gone"}}`, 404)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, bodies[i])
	}))
	t.Cleanup(srv.Close)
	return bhttp.NewClient(srv.URL, "tok"), &afters
}

func TestEventStream_Parse(t *testing.T) {
	t.Run("Format", func(t *testing.T) {
		// Comments, CRLF, a data field split over lines, fields without a
		// space after the colon, a block without data, unknown fields.
		c, _ := sseServer(t, ": hello\n\n"+
			"id: 1\r\nevent: stdout\r\ndata: {\"seq\":1,\r\ndata: \"kind\":\"stdout\",\"data\":\"YQ==\"}\r\n\r\n"+
			"retry: 10\nevent: nothing\n\n"+
			"id:2\nevent:stderr\ndata:{\"seq\":2,\"kind\":\"stderr\",\"data\":\"Yg==\"}\n\n"+
			": keepalive\n\n"+
			"event: end\ndata: {\"id\":\"cmd_1\",\"state\":\"completed\",\"exit_code\":0}\n\n")
		s, err := c.Events(t.Context(), "cmd_1", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		seqs, data, end := drain(t, s)
		if !slices.Equal(seqs, []int64{1, 2}) || data != "ab" || end.ID != "cmd_1" || *end.ExitCode != 0 {
			t.Errorf("seqs %v data %q end %+v", seqs, data, end)
		}
	})
	t.Run("Resume", func(t *testing.T) {
		// The first connection breaks inside event 3; the second resends 2.
		c, afters := sseServer(t,
			"id: 1\nevent: stdout\ndata: {\"seq\":1}\n\nid: 2\nevent: stdout\ndata: {\"seq\":2}\n\nid: 3\nevent: std",
			"id: 2\nevent: stdout\ndata: {\"seq\":2}\n\nid: 3\nevent: stdout\ndata: {\"seq\":3}\n\nevent: end\ndata: {\"id\":\"c\"}\n\n")
		s, err := c.Events(t.Context(), "c", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		seqs, _, end := drain(t, s)
		if !slices.Equal(seqs, []int64{1, 2, 3}) || end.ID != "c" || !slices.Equal(*afters, []string{"0", "2"}) {
			t.Errorf("seqs %v end %+v afters %v", seqs, end, *afters)
		}
	})
	t.Run("Raw", func(t *testing.T) {
		// A raw stream returns the re-sent 2 and does not reconnect after
		// the break inside event 4.
		c, afters := sseServer(t,
			"id: 1\nevent: stdout\ndata: {\"seq\":1}\n\nid: 2\nevent: stdout\ndata: {\"seq\":2}\n\nid: 2\nevent: stdout\ndata: {\"seq\":2}\n\n"+
				"id: 3\nevent: stdout\ndata: {\"seq\":3}\n\nid: 4\nevent: std",
			"event: end\ndata: {\"id\":\"c\"}\n\n")
		s, err := c.Events(t.Context(), "c", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.Raw = true
		var seqs []int64
		for {
			ev, err := s.Next()
			if err != nil {
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("Next: %v, want io.ErrUnexpectedEOF", err)
				}
				break
			}
			seqs = append(seqs, ev.Seq)
		}
		if !slices.Equal(seqs, []int64{1, 2, 2, 3}) || s.After() != 3 || !slices.Equal(*afters, []string{"0"}) {
			t.Errorf("seqs %v after %d afters %v", seqs, s.After(), *afters)
		}
	})
	t.Run("ErrGivesUp", func(t *testing.T) {
		// A stream that keeps breaking fails after a few tries; a 404 on
		// reconnecting is not retried.
		c, afters := sseServer(t, "id: 1\nevent: stdout\ndata: {\"seq\":1}\n\n")
		s, err := c.Events(t.Context(), "c", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if ev, err := s.Next(); err != nil || ev.Seq != 1 {
			t.Fatalf("Next = %+v, %v", ev, err)
		}
		_, err = s.Next()
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		if len(*afters) != 2 {
			t.Errorf("afters %v", *afters)
		}
	})
	t.Run("ErrorEvent", func(t *testing.T) {
		c, _ := sseServer(t, "event: error\ndata: {\"error\":{\"code\":\"internal\",\"message\":\"internal error\"}}\n\n")
		s, err := c.Events(t.Context(), "c", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_, err = s.Next()
		storetest.WantCode(t, err, bothy.EINTERNAL)
	})
	t.Run("Close", func(t *testing.T) {
		c, _ := sseServer(t, "id: 1\nevent: stdout\ndata: {\"seq\":1}\n\n")
		s, err := c.Events(t.Context(), "c", 0)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if _, err := s.Next(); err == nil || errors.Is(err, io.EOF) {
			t.Errorf("Next after Close: %v", err)
		}
	})
}

// out returns an output event of kind holding s.
func out(kind, s string) bothy.Event { return bothy.Event{Kind: kind, Data: []byte(s)} }

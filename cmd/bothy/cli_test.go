package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	nethttp "net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/computetest"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/storetest"
	"github.com/bothyhq/bothy/workspace"
)

// cliAPI is an API server over a real SQLite store and a computetest.Fake, whose
// URL and token are in BOTHY_URL and BOTHY_TOKEN for the test.
type cliAPI struct {
	store bothy.Store
	fake  *computetest.Fake

	mu     sync.Mutex
	afters []string // the after of each events request
	cut    int      // if non-zero, the next events response breaks after this many bytes
}

func newCLIAPI(t *testing.T) *cliAPI {
	t.Helper()
	store := storetest.OpenSQLite(t)
	blobs, err := localblob.Open(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateTenant(t.Context(), &bothy.Tenant{ID: "default", HashKey: make([]byte, 32)}); err != nil {
		t.Fatal(err)
	}
	_, token, err := store.CreateToken(t.Context(), "default", "tester", []string{bothy.ScopeAdmin}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	a := &cliAPI{store: store, fake: computetest.NewFake(store)}
	srv := bhttp.NewServer(store, workspace.New(store, blobs, workspace.Options{}), bhttp.Options{
		Compute: a.fake, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ts := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if strings.HasSuffix(r.URL.Path, "/events") {
			a.mu.Lock()
			a.afters = append(a.afters, r.URL.Query().Get("after"))
			if a.cut > 0 {
				w = &cutWriter{ResponseWriter: w, left: a.cut}
				a.cut = 0
			}
			a.mu.Unlock()
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	t.Setenv("BOTHY_URL", ts.URL)
	t.Setenv("BOTHY_TOKEN", token)
	return a
}

// cutWriter breaks a response after left bytes, as a dropped connection
// would, mid-event.
type cutWriter struct {
	nethttp.ResponseWriter
	left int
}

func (w *cutWriter) Write(b []byte) (int, error) {
	if len(b) > w.left {
		n, _ := w.ResponseWriter.Write(b[:w.left])
		w.left = 0
		return n, errors.New("connection cut")
	}
	w.left -= len(b)
	return w.ResponseWriter.Write(b)
}

func (w *cutWriter) Unwrap() nethttp.ResponseWriter { return w.ResponseWriter }

// syncBuffer is a bytes.Buffer safe for a verb's goroutine and the test, which
// closes wrote on the first write.
type syncBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{wrote: make(chan struct{})} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() == 0 && len(p) > 0 {
		close(b.wrote)
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// testCLI returns a cli reading in (a terminal if in is "") and writing to
// buffers.
func testCLI(in string) (*cli, *syncBuffer, *syncBuffer) {
	out, errb := newSyncBuffer(), newSyncBuffer()
	return &cli{in: strings.NewReader(in), out: out, err: errb, inTerminal: in == ""}, out, errb
}

// callVerb runs a verb and returns its stdout.
func callVerb(t *testing.T, verb func(*cli, context.Context, []string) error, args ...string) string {
	t.Helper()
	c, out, errb := testCLI("")
	if err := verb(c, t.Context(), args); err != nil {
		t.Fatalf("%q: %v; stderr: %s", args, err, errb)
	}
	return out.String()
}

// goVerb runs a verb in a goroutine and returns its error's channel.
func goVerb(ctx context.Context, c *cli, verb func(*cli, context.Context, []string) error, args ...string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- verb(c, ctx, args) }()
	return done
}

func wantExit(t *testing.T, err error, code int) {
	t.Helper()
	var got exitCode
	if code == 0 && err == nil {
		return
	} else if !errors.As(err, &got) || int(got) != code {
		t.Fatalf("verb returned %v, want exit status %d", err, code)
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		stopAfter int
		pos       []string
		json      bool
		key       string
	}{
		{[]string{"ID", "--json"}, -1, []string{"ID"}, true, ""},
		{[]string{"--json", "A", "B", "--key", "k"}, -1, []string{"A", "B"}, true, "k"},
		{[]string{"A", "--", "--json"}, -1, []string{"A", "--json"}, false, ""},
		{[]string{"ID", "ls", "-la"}, 1, []string{"ID", "ls", "-la"}, false, ""},
		{[]string{"ID", "--key", "k", "echo", "--json"}, 1, []string{"ID", "echo", "--json"}, false, "k"},
		{[]string{"--json", "ID", "--", "ls", "--", "-x"}, 1, []string{"ID", "ls", "--", "-x"}, true, ""},
		{[]string{"ID", "--json", "--", "sh"}, 1, []string{"ID", "sh"}, true, ""},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		asJSON := fs.Bool("json", false, "")
		key := fs.String("key", "", "")
		pos, err := parseArgs(fs, tc.args, tc.stopAfter)
		if err != nil || !slices.Equal(pos, tc.pos) || *asJSON != tc.json || *key != tc.key {
			t.Errorf("parseArgs(%q, %d) = %q json %v key %q, %v; want %q %v %q", tc.args, tc.stopAfter, pos, *asJSON, *key, err, tc.pos, tc.json, tc.key)
		}
	}
}

func TestCommandExit(t *testing.T) {
	n := func(i int) *int { return &i }
	for _, tc := range []struct {
		cmd  bothy.Command
		code int
		msg  string
	}{
		{bothy.Command{State: bothy.CommandCompleted, ExitCode: n(0)}, 0, ""},
		{bothy.Command{State: bothy.CommandCompleted, ExitCode: n(42)}, 42, ""},
		{bothy.Command{State: bothy.CommandCompleted, ExitCode: n(137), Signal: "SIGKILL"}, 137, ""},
		{bothy.Command{State: bothy.CommandTimedOut, ExitCode: n(137)}, 124, "timed out"},
		{bothy.Command{State: bothy.CommandCancelled}, 1, "cancelled"},
		{bothy.Command{State: bothy.CommandFailed}, 1, "failed"},
		{bothy.Command{State: bothy.CommandLost}, 1, "lost"},
		{bothy.Command{State: bothy.CommandRunning}, 1, "running"},
	} {
		code, msg := commandExit(&tc.cmd)
		if code != tc.code || !strings.Contains(msg, tc.msg) || (tc.msg == "") != (msg == "") {
			t.Errorf("commandExit(%s) = %d %q, want %d %q", tc.cmd.State, code, msg, tc.code, tc.msg)
		}
	}
}

func TestCLI_Computers(t *testing.T) {
	a := newCLIAPI(t)
	id := strings.TrimSpace(callVerb(t, (*cli).create, "--label", "l1", "--conversation", "conv"))
	if !strings.HasPrefix(id, "cmp_") {
		t.Fatalf("create printed %q", id)
	}
	var cm bothy.Computer
	if err := json.Unmarshal([]byte(callVerb(t, (*cli).create, "--json", "--label", "l2")), &cm); err != nil || cm.Label != "l2" {
		t.Fatalf("create --json: %+v, %v", cm, err)
	}
	if out := callVerb(t, (*cli).list); !strings.Contains(out, id) || !strings.Contains(out, cm.ID) || !strings.HasPrefix(out, "ID") {
		t.Errorf("ls:\n%s", out)
	}
	var list bhttp.ComputerList
	if err := json.Unmarshal([]byte(callVerb(t, (*cli).list, "--label", "l1", "--json")), &list); err != nil || len(list.Computers) != 1 || list.Computers[0].ID != id {
		t.Errorf("ls --label l1 --json: %+v, %v", list, err)
	}
	if out := callVerb(t, (*cli).get, id); !strings.Contains(out, "conv") || !strings.Contains(out, "cold") {
		t.Errorf("get:\n%s", out)
	}
	callVerb(t, (*cli).stop, id)
	if out := callVerb(t, (*cli).destroy, id, "--json"); !strings.Contains(out, `"state":"destroyed"`) {
		t.Errorf("destroy --json: %s", out)
	}
	if !a.fake.Called("stop "+id) || !a.fake.Called("destroy "+id) {
		t.Errorf("calls %v", a.fake.Calls())
	}
	if out := callVerb(t, (*cli).revisions, cm.ID); !strings.HasPrefix(out, "REVISION") {
		t.Errorf("revisions:\n%s", out)
	}

	c, _, _ := testCLI("")
	if err := c.get(t.Context(), []string{"cmp_missing"}); bothy.ErrorCode(err) != bothy.ENOTFOUND {
		t.Errorf("get of a missing computer: %v", err)
	}
	if err := c.get(t.Context(), nil); bothy.ErrorCode(err) != bothy.EINVALID {
		t.Errorf("get without an id: %v", err)
	}
	t.Setenv("BOTHY_URL", "")
	if err := c.list(t.Context(), nil); err == nil || !strings.Contains(err.Error(), "BOTHY_URL") {
		t.Errorf("ls without a server: %v", err)
	}
}

func TestCLI_Run(t *testing.T) {
	a := newCLIAPI(t)
	id := strings.TrimSpace(callVerb(t, (*cli).create))

	t.Run("OK", func(t *testing.T) {
		c, out, errb := testCLI("input")
		done := goVerb(t.Context(), c, (*cli).run, id, "--cwd", "src", "--env", "A=1", "--timeout", "2s", "--", "sh", "-c", "x")
		cmdID := <-a.fake.Started()
		a.fake.Emit(t, "default", cmdID, out1(bothy.EventStdout, "hello\n"), out1(bothy.EventStderr, "oops\n"), out1(bothy.EventStdout, "bye\n"))
		a.fake.Finish(t, "default", cmdID, bothy.CommandCompleted, 3)
		wantExit(t, <-done, 3)
		if out.String() != "hello\nbye\n" || errb.String() != "oops\n" {
			t.Errorf("stdout %q stderr %q", out, errb)
		}
		cmd, err := a.store.FindCommand(t.Context(), "default", cmdID)
		if err != nil || !slices.Equal(cmd.Argv, []string{"sh", "-c", "x"}) || cmd.Cwd != "src" || !slices.Equal(cmd.EnvNames, []string{"A"}) || cmd.TimeoutMS != 2000 {
			t.Errorf("command %+v, %v", cmd, err)
		}
		if a.fake.Stdin(cmdID) != "input" {
			t.Errorf("stdin %q", a.fake.Stdin(cmdID))
		}
	})
	t.Run("JSON", func(t *testing.T) {
		c, out, _ := testCLI("")
		done := goVerb(t.Context(), c, (*cli).run, "--json", id, "true")
		cmdID := <-a.fake.Started()
		a.fake.Emit(t, "default", cmdID, out1(bothy.EventStdout, "a"), out1(bothy.EventStdout, "b"))
		a.fake.Finish(t, "default", cmdID, bothy.CommandTimedOut, 0)
		wantExit(t, <-done, 124)
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var ev bothy.Event
		var cmd bothy.Command
		if len(lines) != 3 || json.Unmarshal([]byte(lines[1]), &ev) != nil || ev.Seq != 2 || string(ev.Data) != "b" ||
			json.Unmarshal([]byte(lines[2]), &cmd) != nil || cmd.State != bothy.CommandTimedOut {
			t.Errorf("run --json printed:\n%s", out)
		}
	})
	t.Run("DetachWaitLogs", func(t *testing.T) {
		cmdID := strings.TrimSpace(callVerb(t, (*cli).run, id, "--detach", "--key", "k1", "make"))
		if again := strings.TrimSpace(callVerb(t, (*cli).run, id, "--detach", "--key", "k1", "make")); again != cmdID {
			t.Errorf("the same key gave %s, then %s", cmdID, again)
		}
		<-a.fake.Started()
		a.fake.Emit(t, "default", cmdID, out1(bothy.EventStdout, "1\n"), out1(bothy.EventStderr, "2\n"), out1(bothy.EventStdout, "3\n"))
		if got := callVerb(t, (*cli).logs, cmdID); got != "1\n3\n" {
			t.Errorf("logs printed %q", got)
		}
		if got := callVerb(t, (*cli).logs, cmdID, "--after", "2"); got != "3\n" {
			t.Errorf("logs --after 2 printed %q", got)
		}
		c, _, _ := testCLI("")
		waited := goVerb(t.Context(), c, (*cli).wait, cmdID)
		fc, fout, _ := testCLI("")
		followed := goVerb(t.Context(), fc, (*cli).logs, cmdID, "--follow", "--after", "1")
		a.fake.Emit(t, "default", cmdID, out1(bothy.EventStdout, "4\n"))
		a.fake.Finish(t, "default", cmdID, bothy.CommandFailed, 0)
		wantExit(t, <-waited, 1)
		if err := <-followed; err != nil || fout.String() != "3\n4\n" {
			t.Errorf("logs --follow: %q, %v", fout, err)
		}
	})
	t.Run("Resume", func(t *testing.T) {
		a.mu.Lock()
		a.afters, a.cut = nil, 200 // a little over one event
		a.mu.Unlock()
		c, out, _ := testCLI("")
		done := goVerb(t.Context(), c, (*cli).run, id, "seq", "5")
		cmdID := <-a.fake.Started()
		var evs []bothy.Event
		for _, s := range []string{"1\n", "2\n", "3\n", "4\n", "5\n"} {
			evs = append(evs, out1(bothy.EventStdout, s))
		}
		a.fake.Emit(t, "default", cmdID, evs...)
		a.fake.Finish(t, "default", cmdID, bothy.CommandCompleted, 0)
		wantExit(t, <-done, 0)
		a.mu.Lock()
		defer a.mu.Unlock()
		if out.String() != "1\n2\n3\n4\n5\n" || !slices.Equal(a.afters, []string{"0", "1"}) {
			t.Errorf("stdout %q after a break; stream requests after %v", out, a.afters)
		}
	})
	t.Run("Interrupt", func(t *testing.T) {
		ctx, interrupt := context.WithCancel(t.Context())
		defer interrupt()
		c, out, errb := testCLI("")
		done := goVerb(ctx, c, (*cli).run, id, "sleep", "1000")
		cmdID := <-a.fake.Started()
		a.fake.Emit(t, "default", cmdID, out1(bothy.EventStdout, "started\n"))
		<-out.wrote
		interrupt()
		wantExit(t, <-done, 1)
		if !a.fake.Called("cancel "+cmdID) || !strings.Contains(errb.String(), "cancelling "+cmdID) || !strings.Contains(errb.String(), "cancelled") {
			t.Errorf("after an interrupt: calls %v, stderr %q", a.fake.Calls(), errb)
		}
	})
	t.Run("ErrTooLarge", func(t *testing.T) {
		c, _, _ := testCLI(strings.Repeat("x", bothy.MaxStdinBytes+1))
		if err := c.run(t.Context(), []string{id, "cat"}); bothy.ErrorCode(err) != bothy.ETOOLARGE {
			t.Errorf("run with 1 MiB + 1 of stdin: %v", err)
		}
		c, _, _ = testCLI("\xff\xfe")
		if err := c.run(t.Context(), []string{id, "cat"}); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Errorf("run with binary stdin: %v", err)
		}
		c, _, _ = testCLI(strings.Repeat("x", bothy.MaxStdinBytes+1))
		if err := c.run(t.Context(), []string{id, "--stdin=false", "--detach", "true"}); err != nil {
			t.Errorf("run --stdin=false: %v", err)
		}
		<-a.fake.Started()
	})
	t.Run("ErrUsage", func(t *testing.T) {
		c, _, _ := testCLI("")
		for _, args := range [][]string{{id}, {}, {id, "--env", "novalue", "x"}} {
			if err := c.run(t.Context(), args); err == nil {
				t.Errorf("run %q succeeded", args)
			}
		}
	})
}

func TestCLI_Fs(t *testing.T) {
	newCLIAPI(t)
	id := strings.TrimSpace(callVerb(t, (*cli).create))
	c, out, _ := testCLI("hello world\nbye\n")
	if err := c.fs(t.Context(), []string{"put", id, "dir/a.txt", "--mode", "0600"}); err != nil || !strings.HasPrefix(out.String(), "revision 1") {
		t.Fatalf("fs put: %q, %v", out, err)
	}
	if got := callVerb(t, (*cli).fs, "cat", id, "dir/a.txt"); got != "hello world\nbye\n" {
		t.Errorf("fs cat: %q", got)
	}
	if got := callVerb(t, (*cli).fs, "ls", id); !strings.Contains(got, "dir/") {
		t.Errorf("fs ls: %q", got)
	}
	if got := callVerb(t, (*cli).fs, "stat", id, "dir/a.txt"); !strings.Contains(got, "0600") || !strings.Contains(got, "16") {
		t.Errorf("fs stat: %q", got)
	}
	if got := callVerb(t, (*cli).fs, "grep", id, "-i", "WORLD"); got != "dir/a.txt:1:hello world\n" {
		t.Errorf("fs grep: %q", got)
	}
	c, _, _ = testCLI("")
	wantExit(t, c.fs(t.Context(), []string{"grep", id, "absent", "dir"}), 1)
	var res bothy.GrepResult
	if err := json.Unmarshal([]byte(callVerb(t, (*cli).fs, "grep", "--json", id, "bye")), &res); err != nil || len(res.Matches) != 1 || res.Matches[0].Line != 2 {
		t.Errorf("fs grep --json: %+v, %v", res, err)
	}
	callVerb(t, (*cli).fs, "rm", "-r", id, "dir")
	if err := c.fs(t.Context(), []string{"cat", id, "dir/a.txt"}); bothy.ErrorCode(err) != bothy.ENOTFOUND {
		t.Errorf("fs cat after rm: %v", err)
	}
	if err := c.fs(t.Context(), []string{"chmod", id, "x"}); bothy.ErrorCode(err) != bothy.EINVALID {
		t.Errorf("fs chmod: %v", err)
	}
}

func TestLocal(t *testing.T) {
	data := t.TempDir()
	f := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(f, []byte("local"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(t.Context(), []string{"local", "put", "--data", data, "-c", "c1", "a.txt", f}); err != nil {
		t.Fatal(err)
	}
	if err := run(t.Context(), []string{"local", "ls", "--data", data, "-c", "c1"}); err != nil {
		t.Fatal(err)
	}
	if err := run(t.Context(), []string{"local", "rm", "--data", data}); bothy.ErrorCode(err) != bothy.EINVALID {
		t.Errorf("local rm: %v", err)
	}
}

// out1 returns an output event of kind holding s.
func out1(kind, s string) bothy.Event { return bothy.Event{Kind: kind, Data: []byte(s)} }

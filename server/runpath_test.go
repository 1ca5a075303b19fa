package server_test

// TestRunPath drives the whole run path without privilege: the control
// plane and the in-process agent of server.New, a real supervisor process
// per lease (this test binary, re-executed), the process provider and the
// copy workspace (hostcache.ModeCopy), real commands. It runs as any user;
// scripts/test runs it again as nobody.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	nethttp "net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/control"
	"github.com/bothyhq/bothy/hostcache"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/process"
	"github.com/bothyhq/bothy/server"
	"github.com/bothyhq/bothy/sqlite"
	"github.com/bothyhq/bothy/supervisor"
)

// TestMain makes the test binary a supervisor too, as the bothy binary is
// (`bothy supervisor -dir DIR`), so that the agent can spawn one per lease.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "supervisor" {
		os.Exit(supervisor.Main(os.Args[2:], process.New()))
	}
	os.Exit(m.Run())
}

// runPath is a server with an in-process agent on one data directory,
// and a client of its API.
type runPath struct {
	dir    string
	store  bothy.Store
	blobs  bothy.BlobStore
	tenant string
	token  string
	exe    string
	logf   *os.File
	client *bhttp.Client
	stop   func() // stops the running server; idempotent
}

// startRunPath makes a fresh data directory, store and tenant and starts
// the server on it (start). Cleanup stops it.
func startRunPath(t *testing.T) *runPath {
	t.Helper()
	dir := t.TempDir()
	return newRunPath(t, dir, dir, "runpath")
}

// newRunPath starts a runPath on the data directory dir, with the store,
// the blobs and the server's log in meta, and a tenant named name.
func newRunPath(t *testing.T, dir, meta, name string) *runPath {
	t.Helper()
	ctx := t.Context()
	e := &runPath{dir: dir, stop: func() {}}
	var err error
	if e.store, err = sqlite.Open(ctx, filepath.Join(meta, "bothy.db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	if e.blobs, err = localblob.Open(filepath.Join(meta, "blobs")); err != nil {
		t.Fatal(err)
	}
	tenant, err := bothy.NewTenant(name, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.CreateTenant(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	e.tenant = tenant.ID
	if _, e.token, err = e.store.CreateToken(ctx, tenant.ID, name, []string{bothy.ScopeAdmin}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if e.exe, err = os.Executable(); err != nil {
		t.Fatal(err)
	}
	if e.logf, err = os.Create(filepath.Join(meta, "serve.log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.stop()
		if t.Failed() || testing.Verbose() {
			b, _ := os.ReadFile(e.logf.Name())
			t.Logf("server log:\n%s", b)
		}
		e.logf.Close()
	})
	e.start(t)
	return e
}

// start runs server.New on the data directory with the process provider
// and the copy workspace, serving on a new loopback port, and points the
// client at it. stop ends it and fails the test unless its Run returns.
func (e *runPath) start(t *testing.T) {
	t.Helper()
	srv, err := server.New(server.Config{
		Data: e.dir, Store: e.store, Blobs: e.blobs, Profiles: map[string]string{"standard": process.Name},
		AgentToken: "runpath-agent-token", Providers: []bothy.Provider{process.New()},
		SupervisorCommand: []string{e.exe, "supervisor"}, Workspace: hostcache.ModeCopy,
		Logger: slog.New(slog.NewTextHandler(e.logf, nil)),
		// A scratch limit makes the provider wrap commands in prlimit and
		// the agent watch what the copy grows by.
		Control: control.Config{IdleTimeout: time.Hour, Limits: bothy.Limits{ScratchBytes: 1 << 30}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	hs := &nethttp.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx, url) }()
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("server Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("server Run did not return within 30 s of its context's end")
			}
			hs.Close()
		})
	}
	e.client = bhttp.NewClient(url, e.token)
	if err := e.client.Health(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// stream reads a command's events from seq after to the end, and returns
// them with the final command.
func (e *runPath) stream(t *testing.T, id string, after int64) ([]*bothy.Event, *bothy.Command) {
	t.Helper()
	s, err := e.client.Events(t.Context(), id, after)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []*bothy.Event
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out, s.Command()
		} else if err != nil {
			t.Fatalf("events of %s after %d: %v", id, after, err)
		}
		out = append(out, ev)
	}
}

func (e *runPath) readFile(t *testing.T, computerID, p string) string {
	t.Helper()
	rc, _, err := e.client.ReadFile(t.Context(), "", computerID, p, 0, -1)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

// checkEvents fails unless events are seq 1, 2, … with no gap or
// duplicate, hold exactly one exit event, which comes after every output
// event, and their stdout and stderr are wantOut and wantErr.
func checkEvents(t *testing.T, events []*bothy.Event, wantOut, wantErr string) {
	t.Helper()
	var out, errOut strings.Builder
	exits := 0
	for i, ev := range events {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: %+v", i, ev.Seq, events)
		}
		switch ev.Kind {
		case bothy.EventStdout, bothy.EventStderr:
			if exits > 0 {
				t.Errorf("output event %d after the exit event", ev.Seq)
			}
			if ev.Kind == bothy.EventStdout {
				out.Write(ev.Data)
			} else {
				errOut.Write(ev.Data)
			}
		case bothy.EventExit:
			exits++
		}
	}
	if exits != 1 {
		t.Errorf("%d exit events, want 1", exits)
	}
	if out.String() != wantOut || errOut.String() != wantErr {
		t.Errorf("stdout %q, stderr %q; want %q, %q", out.String(), errOut.String(), wantOut, wantErr)
	}
}

// newComputer creates a cold computer and writes in.txt into it.
func (e *runPath) newComputer(t *testing.T, label string) *bothy.Computer {
	t.Helper()
	c, err := e.client.CreateComputer(t.Context(), bhttp.CreateComputerRequest{Label: label})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.WriteFile(t.Context(), "", c.ID, "in.txt", strings.NewReader("hello\n"), bothy.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// run submits a command and returns it without waiting.
func (e *runPath) run(t *testing.T, computerID string, req bothy.RunRequest) *bothy.Command {
	t.Helper()
	cmd, err := e.client.RunCommand(t.Context(), computerID, req)
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// finish streams a command's events to its end, fails unless it completed
// with exit code 0 and checkEvents holds, and returns its final state.
func (e *runPath) finish(t *testing.T, id, wantOut, wantErr string) *bothy.Command {
	t.Helper()
	events, final := e.stream(t, id, 0)
	if final == nil || final.State != bothy.CommandCompleted || final.ExitCode == nil || *final.ExitCode != 0 {
		t.Fatalf("command %s ended %+v", id, final)
	}
	checkEvents(t, events, wantOut, wantErr)
	return final
}

// stopCold stops a computer and fails unless it is cold.
func (e *runPath) stopCold(t *testing.T, computerID string) {
	t.Helper()
	c, err := e.client.StopComputer(t.Context(), computerID)
	if err != nil {
		t.Fatal(err)
	} else if c.State != bothy.StateCold {
		t.Fatalf("after stop the computer is %s", c.State)
	}
}

func TestRunPath(t *testing.T) {
	e := startRunPath(t)
	c := e.newComputer(t, "runpath")

	// The command reads the written file, writes another, and prints on
	// both streams around a pause, so the stream is read while it runs.
	// It leaves a read-only directory, which the next lease's copy
	// restores read-only and its teardown must still remove.
	cmd := e.run(t, c.ID, bothy.RunRequest{
		Script: "cat in.txt > out.txt && echo done >> out.txt && cat out.txt && echo warn >&2 && " +
			"mkdir ro && echo x > ro/f && chmod 555 ro && sleep 0.3 && echo last"})
	first := e.finish(t, cmd.ID, "hello\ndone\nlast\n", "warn\n")
	// Read again from the start and from the middle: the same events,
	// each once.
	events, _ := e.stream(t, cmd.ID, 0)
	again, _ := e.stream(t, cmd.ID, 0)
	if len(again) != len(events) {
		t.Fatalf("a second read of the stream has %d events, the first %d", len(again), len(events))
	}
	for i := range events {
		if again[i].Seq != events[i].Seq || again[i].Kind != events[i].Kind || string(again[i].Data) != string(events[i].Data) {
			t.Fatalf("event %d differs on a second read: %+v, then %+v", i, events[i], again[i])
		}
	}
	if tail, _ := e.stream(t, cmd.ID, 2); len(tail) != len(events)-2 || tail[0].Seq != 3 {
		t.Fatalf("events after seq 2: %d events from seq %d, want %d from 3", len(tail), tail[0].Seq, len(events)-2)
	}

	// The lease's workspace is a plain copy (no overlay is mounted), and
	// the file the command wrote is in it.
	copies, _ := filepath.Glob(filepath.Join(e.dir, "agent", "leases", "*", "ws", "tree", "out.txt"))
	if len(copies) != 1 {
		t.Errorf("the running lease has %d copied workspaces holding out.txt, want 1", len(copies))
	}
	if mounts, err := hostcache.OverlayMounts(e.dir); err != nil || len(mounts) != 0 {
		t.Errorf("overlay mounts under the data directory: %v (%v)", mounts, err)
	}

	// Stop: the computer goes cold, its files committed.
	e.stopCold(t, c.ID)
	if got := e.readFile(t, c.ID, "out.txt"); got != "hello\ndone\n" {
		t.Errorf("cold out.txt = %q", got)
	}

	// Run again on a new lease: both files are there.
	second := e.run(t, c.ID, bothy.RunRequest{Argv: []string{"cat", "in.txt", "out.txt", "ro/f"}, Wait: true})
	final := e.finish(t, second.ID, "hello\nhello\ndone\nx\n", "")
	if final.LeaseID == "" || final.LeaseID == first.LeaseID {
		t.Errorf("the second command ran on lease %q, the first on %q: want a new lease", final.LeaseID, first.LeaseID)
	}

	if _, err := e.client.DestroyComputer(t.Context(), c.ID); err != nil {
		t.Fatal(err)
	}
	e.checkReleased(t, c.ID, 2)
}

// TestRunPath_Restart restarts the server, and its in-process agent, while
// a command runs: the supervisor outlives them, the new agent takes the
// lease over with its copied workspace as it was, the command's events
// come once each, in order, and the next command runs on the same lease.
func TestRunPath_Restart(t *testing.T) {
	e := startRunPath(t)
	c := e.newComputer(t, "runpath-restart")
	first := e.finish(t, e.run(t, c.ID, bothy.RunRequest{Script: "echo one > one.txt", Wait: true}).ID, "", "")
	cmd := e.run(t, c.ID, bothy.RunRequest{Script: "echo before && sleep 1 && cat in.txt && echo two > two.txt"})
	// Wait until it runs, so the restart falls in its middle.
	s, err := e.client.Events(t.Context(), cmd.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("events before the restart: %v", err)
		} else if ev.Kind == bothy.EventStdout {
			break
		}
	}
	s.Close()
	e.stop()
	e.start(t)

	e.finish(t, cmd.ID, "before\nhello\n", "")
	next := e.run(t, c.ID, bothy.RunRequest{Argv: []string{"cat", "one.txt", "two.txt"}, Wait: true})
	if final := e.finish(t, next.ID, "one\ntwo\n", ""); final.LeaseID != first.LeaseID {
		t.Errorf("the command after the restart ran on lease %s, not on %s, which the new agent should have taken over", final.LeaseID, first.LeaseID)
	}
	e.stopCold(t, c.ID)
	if got := e.readFile(t, c.ID, "two.txt"); got != "two\n" {
		t.Errorf("cold two.txt = %q", got)
	}
	if _, err := e.client.DestroyComputer(t.Context(), c.ID); err != nil {
		t.Fatal(err)
	}
	e.checkReleased(t, c.ID, 1)
}

// checkReleased waits until every lease of the computer is released, and
// fails unless each was released with no residue and its directory is gone.
func (e *runPath) checkReleased(t *testing.T, computerID string, want int) {
	t.Helper()
	ctx := t.Context()
	cmds, err := e.store.ListCommands(ctx, e.tenant, bothy.CommandFilter{ComputerID: computerID})
	if err != nil {
		t.Fatal(err)
	}
	leases := map[string]bool{}
	for _, c := range cmds {
		if c.LeaseID != "" {
			leases[c.LeaseID] = true
		}
	}
	if len(leases) != want {
		t.Errorf("the computer's commands ran on %d leases, want %d", len(leases), want)
	}
	var wg sync.WaitGroup
	for id := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(30 * time.Second)
			for {
				l, err := e.store.FindLease(ctx, e.tenant, id)
				if err != nil {
					t.Error(err)
					return
				}
				if !l.ReleasedAt.IsZero() {
					if l.Disposition != bothy.LeaseReleased || l.Residue != "" {
						t.Errorf("lease %s: disposition %q, residue %q", id, l.Disposition, l.Residue)
					}
					break
				} else if time.Now().After(deadline) {
					t.Errorf("lease %s is not released 30 s after its computer's destroy", id)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			deadline = time.Now().Add(10 * time.Second)
			for {
				if _, err := os.Lstat(filepath.Join(e.dir, "agent", "leases", id)); errors.Is(err, os.ErrNotExist) {
					return
				} else if time.Now().After(deadline) {
					t.Errorf("lease %s is released, but its directory is still there (%v)", id, err)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

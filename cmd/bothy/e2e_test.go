package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/postgres"
	"github.com/bothyhq/bothy/postgres/pgtest"
	"github.com/bothyhq/bothy/sqlite"
	"github.com/bothyhq/bothy/testenv"
)

// These tests run the real thing: `bothy serve` as a process, its
// in-process agent speaking the runtime protocol over loopback, a
// supervisor process per lease, and bubblewrap sandboxes over overlay
// workspaces. They need root and bubblewrap (scripts/sandbox-deps).

func needSandbox(t *testing.T) {
	t.Helper()
	testenv.Root(t, "end-to-end tests need root (bubblewrap, cgroups, overlayfs)")
}

// serveAPI starts `bothy serve` with args on a new data directory and
// returns the directory, the server and an API client with its admin
// token.
func serveAPI(t *testing.T, args ...string) (string, *server, *apiClient) {
	t.Helper()
	data := t.TempDir()
	s := startServeWith(t, data, nil, args...)
	return data, s, newAPI(t, s, serverToken(t, s, data))
}

func serverToken(t *testing.T, s *server, data string) string {
	if tok, ok := strings.CutPrefix(s.tokenLn, "export BOTHY_TOKEN="); ok && strings.HasPrefix(tok, bothy.TokenPrefix) {
		return tok
	}
	b, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// output concatenates the stdout events.
func output(events []*bothy.Event) string {
	var b strings.Builder
	for _, e := range events {
		if e.Kind == bothy.EventStdout {
			b.Write(e.Data)
		}
	}
	return b.String()
}

// stderr is the stderr of a command's events.
func stderr(events []*bothy.Event) string {
	var b strings.Builder
	for _, e := range events {
		if e.Kind == bothy.EventStderr {
			b.Write(e.Data)
		}
	}
	return b.String()
}

// checkSeqs fails unless the events' seqs are from, from+1, … with no gap
// or duplicate.
func checkSeqs(t *testing.T, events []*bothy.Event, from int64) {
	t.Helper()
	for i, e := range events {
		if e.Seq != from+int64(i) {
			t.Fatalf("event %d has seq %d, want %d", i, e.Seq, from+int64(i))
		}
	}
}

// kill9 kills the server process with SIGKILL, as a crash.
func (s *server) kill9(t *testing.T) {
	t.Helper()
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// waitExit waits for the server to die by itself (a fault injection).
func (s *server) waitExit(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the server did not die at the fault point; stderr:\n%s", s.stderr)
	}
}

// destroyAll destroys every computer of the server (tearing sandboxes
// and supervisors down) and checks that nothing is left.
func destroyAll(t *testing.T, a *apiClient, data string) {
	t.Helper()
	for _, c := range a.computers(bothy.ComputerFilter{Limit: 1000}) {
		if c.State != bothy.StateDestroyed {
			a.destroy(c.ID)
		}
	}
	checkNoResidue(t, data)
}

// checkNoResidue fails if a lease left anything on the host: a lease
// directory of the agent, a mount under the data directory, or a process
// running a supervisor of it.
func checkNoResidue(t *testing.T, data string) {
	t.Helper()
	if ents, err := os.ReadDir(filepath.Join(data, "agent", "leases")); err == nil && len(ents) > 0 {
		t.Errorf("lease directories left: %d", len(ents))
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), data) {
		t.Errorf("mounts left under %s", data)
	}
	for _, pid := range processesMentioning(filepath.Join(data, "agent")) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		t.Errorf("process left: %d %q", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
	}
}

// processesMentioning lists the pids whose command line or environment
// holds s.
func processesMentioning(s string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		for _, f := range []string{"cmdline", "environ"} {
			b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), f))
			if bytes.Contains(b, []byte(s)) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// stores runs fn on the embedded SQLite store and on PostgreSQL.
func stores(t *testing.T, fn func(t *testing.T, storeArgs []string)) {
	t.Run("SQLite", func(t *testing.T) { fn(t, nil) })
	t.Run("PostgreSQL", func(t *testing.T) { fn(t, []string{"--store", pgtest.URL(t)}) })
}

func TestE2E_FilesSurviveStopAndRestart(t *testing.T) {
	needSandbox(t)
	stores(t, func(t *testing.T, storeArgs []string) {
		data := t.TempDir()
		s := startServeWith(t, data, nil, storeArgs...)
		tok := serverToken(t, s, data)
		a := newAPI(t, s, tok)
		c := a.create("e2e")
		a.writeFile(c.ID, "in.txt", "hello\n", bothy.WriteOptions{})

		cmd := a.run(c.ID, bothy.RunRequest{Script: "cat in.txt > out.txt && echo done >> out.txt && cat out.txt", Wait: true})
		if cmd.State != bothy.CommandCompleted || cmd.ExitCode == nil || *cmd.ExitCode != 0 {
			t.Fatalf("first command: %+v", cmd)
		}
		if got := output(a.events(cmd.ID, 0, nil)); got != "hello\ndone\n" {
			t.Fatalf("first command printed %q", got)
		}
		if cmd.RevisionAfter == 0 {
			t.Errorf("the command's result names no revision after it")
		}
		if cm := a.stop(c.ID); cm.State != bothy.StateCold {
			t.Fatalf("after stop the computer is %s", cm.State)
		}
		checkNoResidue(t, data)
		s.stop(t)

		s = startServeWith(t, data, nil, storeArgs...)
		a = newAPI(t, s, tok)
		if got := a.readFile(c.ID, "in.txt"); got != "hello\n" {
			t.Errorf("after restart in.txt = %q", got)
		}
		if got := a.readFile(c.ID, "out.txt"); got != "hello\ndone\n" {
			t.Errorf("after restart out.txt = %q", got)
		}
		again := a.run(c.ID, bothy.RunRequest{Argv: []string{"cat", "out.txt", "in.txt"}, Wait: true})
		if got := output(a.events(again.ID, 0, nil)); again.State != bothy.CommandCompleted || got != "hello\ndone\nhello\n" {
			t.Fatalf("run after restart: %s %q", again.State, got)
		}
		destroyAll(t, a, data)
		s.stop(t)
		checkLeasesReleased(t, data, storeArgs, c.ID)
	})
}

// checkLeasesReleased opens the store and fails unless every lease of the
// computer is released with an empty residue.
func checkLeasesReleased(t *testing.T, data string, storeArgs []string, computerID string) {
	t.Helper()
	ctx := context.Background()
	var st bothy.Store
	var err error
	if len(storeArgs) == 2 && storeArgs[0] == "--store" {
		st, err = postgres.Open(ctx, storeArgs[1])
	} else {
		st, err = sqlite.Open(ctx, filepath.Join(data, "bothy.db"))
	}
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cmds, err := st.ListCommands(ctx, "default", bothy.CommandFilter{ComputerID: computerID})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range cmds {
		if c.LeaseID == "" || seen[c.LeaseID] {
			continue
		}
		seen[c.LeaseID] = true
		l, err := st.FindLease(ctx, "default", c.LeaseID)
		if err != nil {
			t.Fatal(err)
		}
		if l.ReleasedAt.IsZero() || l.Disposition != bothy.LeaseReleased || l.Residue != "" {
			t.Errorf("lease %s: released %v, disposition %q, residue %q", l.ID, l.ReleasedAt, l.Disposition, l.Residue)
		}
	}
	if len(seen) == 0 {
		t.Error("the computer's commands name no lease")
	}
}

// TestE2E_NoReplay kills the control plane at the worst moments: after a
// command is dispatched and before the runtime receives it, and after the
// runtime started it and before the control plane recorded that. The
// command's side effect (a line appended to a counter file) happens exactly
// once, and resubmitting its idempotency key never runs it again.
func TestE2E_NoReplay(t *testing.T) {
	needSandbox(t)
	for _, fault := range []string{"after_dispatch", "before_running_report"} {
		t.Run(fault, func(t *testing.T) {
			stores(t, func(t *testing.T, storeArgs []string) {
				data := t.TempDir()
				s := startServeWith(t, data, []string{"BOTHY_FAULT=" + fault}, storeArgs...)
				tok := serverToken(t, s, data)
				a := newAPI(t, s, tok)
				c := a.create("no-replay")
				req := bothy.RunRequest{Script: "echo run >> counter; echo ran", IdempotencyKey: "k1"}
				st, raw := a.call("POST", "/v1/computers/"+c.ID+"/commands", req, nil)
				if st != 201 {
					t.Fatalf("run: %d %s", st, raw)
				}
				s.waitExit(t)

				s = startServeWith(t, data, nil, storeArgs...)
				a = newAPI(t, s, tok)
				first := a.run(c.ID, req)
				done := a.wait(first.ID)
				if done.State != bothy.CommandCompleted {
					t.Fatalf("after restart the command is %s", done.State)
				}
				if got := a.readFile(c.ID, "counter"); got != "run\n" {
					t.Fatalf("counter = %q, want exactly one run", got)
				}
				var again bothy.Command
				if st, raw := a.call("POST", "/v1/computers/"+c.ID+"/commands", req, &again); st != 200 || again.ID != first.ID {
					t.Fatalf("resubmitting the key: %d %s", st, raw)
				}
				a.stop(c.ID)
				if got := a.readFile(c.ID, "counter"); got != "run\n" {
					t.Fatalf("counter after resubmission = %q", got)
				}
				destroyAll(t, a, data)
				s.stop(t)
			})
		})
	}
}

// TestE2E_CrashDuringCommand kills the embedded server (and with it the
// in-process agent) while a 5 s command runs and a client streams its
// output; after a restart the command finishes, the client resumes after
// the last seq it saw and receives every event exactly once, in order.
func TestE2E_CrashDuringCommand(t *testing.T) {
	needSandbox(t)
	stores(t, func(t *testing.T, storeArgs []string) {
		data := t.TempDir()
		s := startServeWith(t, data, nil, storeArgs...)
		tok := serverToken(t, s, data)
		a := newAPI(t, s, tok)
		c := a.create("crash")
		cmd := a.run(c.ID, bothy.RunRequest{Script: "for i in $(seq 1 50); do echo line $i; sleep 0.1; done; echo once >> counter"})
		first := a.events(cmd.ID, 0, func(e *bothy.Event) bool { return e.Seq >= 5 })
		checkSeqs(t, first, 1)
		s.kill9(t)
		time.Sleep(500 * time.Millisecond)

		s = startServeWith(t, data, nil, storeArgs...)
		a = newAPI(t, s, tok)
		rest := a.events(cmd.ID, first[len(first)-1].Seq, nil)
		checkSeqs(t, rest, first[len(first)-1].Seq+1)
		all := append(first, rest...)
		var want strings.Builder
		for i := 1; i <= 50; i++ {
			fmt.Fprintf(&want, "line %d\n", i)
		}
		if got := output(all); got != want.String() {
			t.Fatalf("output after the crash:\n%q\nwant\n%q", got, want.String())
		}
		done := a.wait(cmd.ID)
		if done.State != bothy.CommandCompleted || *done.ExitCode != 0 || done.LastSeq != all[len(all)-1].Seq {
			t.Fatalf("command after the crash: %+v", done)
		}
		a.stop(c.ID)
		if got := a.readFile(c.ID, "counter"); got != "once\n" {
			t.Fatalf("counter = %q", got)
		}
		destroyAll(t, a, data)
		s.stop(t)
	})
}

// startAgent starts `bothy agent` for the server whose data directory is
// data, keeping its own state in agentData. It polls with a token of its
// own, bound to its id and expiring in an hour (agent:ID), made with
// `bothy admin token create` once per agentData.
func startAgent(t *testing.T, s *server, data, agentData string) *server {
	t.Helper()
	tokenFile := filepath.Join(agentData, "poll.token")
	if _, err := os.Stat(tokenFile); err != nil {
		out, err := bothyCmd(t, "admin", "token", "create", "--data", data, "--owner", "agents", "--scopes", "agent:e2e-agent", "--expires", "1h").Output()
		if err != nil {
			t.Fatalf("admin token create: %v", err)
		}
		if err := os.WriteFile(tokenFile, out, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := bothyCmd(t, "agent", "--control", s.url, "--agent-token-file", tokenFile, "--id", "e2e-agent",
		"--data", agentData, "--blobs", filepath.Join(data, "blobs"))
	return startProcess(t, "agent", cmd)
}

// TestE2E_AgentCrash runs the agent as its own process, dialing out to a
// server that runs none, and kills it with SIGKILL during a 5 s command: the
// command goes on in its supervisor, and a new agent process takes the lease
// over and delivers every event exactly once.
func TestE2E_AgentCrash(t *testing.T) {
	needSandbox(t)
	data, agentData := t.TempDir(), t.TempDir()
	s := startServeWith(t, data, nil, "--no-agent")
	a := newAPI(t, s, serverToken(t, s, data))
	ag := startAgent(t, s, data, agentData)
	c := a.create("agent-crash")
	cmd := a.run(c.ID, bothy.RunRequest{Script: "for i in $(seq 1 50); do echo line $i; sleep 0.1; done; echo once >> counter"})
	first := a.events(cmd.ID, 0, func(e *bothy.Event) bool { return e.Seq >= 5 })
	ag.kill9(t)
	time.Sleep(time.Second)
	startAgent(t, s, data, agentData)
	rest := a.events(cmd.ID, first[len(first)-1].Seq, nil)
	checkSeqs(t, append(first, rest...), 1)
	var want strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got := output(append(first, rest...)); got != want.String() {
		t.Fatalf("output after the agent crash:\n%q", got)
	}
	if done := a.wait(cmd.ID); done.State != bothy.CommandCompleted {
		t.Fatalf("command after the agent crash: %s", done.State)
	}
	a.stop(c.ID)
	if got := a.readFile(c.ID, "counter"); got != "once\n" {
		t.Fatalf("counter = %q", got)
	}
	destroyAll(t, a, agentData)
	s.stop(t)
}

// TestE2E_MissingCwdFails runs a command in a working directory that does
// not exist under bwrap: it fails with an error that says so, runs
// nothing, and the computer runs the next command.
func TestE2E_MissingCwdFails(t *testing.T) {
	needSandbox(t)
	data, _, a := serveAPI(t)
	c := a.create("cwd")
	cmd := a.run(c.ID, bothy.RunRequest{Script: "echo ran > /workspace/ran.txt", Cwd: "no/such/dir", Wait: true})
	if cmd.State != bothy.CommandFailed || !strings.Contains(cmd.Error, `"no/such/dir" does not exist`) {
		t.Fatalf("command: state %s, error %q, exit %v; want failed, the directory does not exist", cmd.State, cmd.Error, cmd.ExitCode)
	}
	next := a.run(c.ID, bothy.RunRequest{Script: "ls /workspace; pwd", Wait: true})
	if got := output(a.events(next.ID, 0, nil)); next.State != bothy.CommandCompleted || got != "/workspace\n" {
		t.Fatalf("next command: %s %q", next.State, got)
	}
	destroyAll(t, a, data)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/sqlite"
)

// TestE2E_LeaseReleasedWhileServeWasDown: serve stops (SIGTERM) with a
// warm lease whose command left a process running in its sandbox, and the
// control plane releases the lease as lost while no agent polls (as its
// TTL does). The next serve finds the lease on disk, and its first poll
// answer does not list it: the agent tears it down from what is on disk,
// without panicking, and stops its supervisor and its sandbox (bwrap, its
// init, the background process, the workspace mounts), not only deletes
// its directory. The computer then runs a command on a new lease.
func TestE2E_LeaseReleasedWhileServeWasDown(t *testing.T) {
	needSandbox(t)
	data := t.TempDir()
	s := startServeWith(t, data, nil)
	a := newAPI(t, s, serverToken(t, s, data))
	c := a.create("orphan")
	done := a.wait(a.run(c.ID, bothy.RunRequest{Script: "sleep 600 >/dev/null 2>&1 & echo started"}).ID)
	if done.State != bothy.CommandCompleted || done.LeaseID == "" {
		t.Fatalf("first command: %+v", done)
	}
	leaseDir := filepath.Join(data, "agent", "leases", done.LeaseID)
	supPid, uid := leaseProcesses(t, leaseDir)
	if len(processesOf(uid)) == 0 {
		t.Fatalf("the sandbox runs no process as uid %d", uid)
	}
	s.stop(t) // the lease stays warm: its supervisor and sandbox run on
	if !pidAlive(supPid) {
		t.Fatalf("supervisor %d ended with serve", supPid)
	}

	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(data, "bothy.db"))
	if err != nil {
		t.Fatal(err)
	}
	err = st.ReleaseLease(ctx, "default", done.LeaseID, done.Generation, bothy.LeaseLost, "")
	st.Close()
	if err != nil {
		t.Fatal(err)
	}

	s = startServeWith(t, data, nil)
	a = newAPI(t, s, serverToken(t, s, data))
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Lstat(leaseDir); os.IsNotExist(err) && !pidAlive(supPid) && len(processesOf(uid)) == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the lease is not torn down: directory %v, supervisor running %v, sandbox processes %v",
				err, pidAlive(supPid), processesOf(uid))
		}
	}
	if strings.Contains(s.stderr.String(), "panic") {
		t.Fatalf("serve panicked:\n%s", s.stderr)
	}
	checkNoResidue(t, data)
	if again := a.wait(a.run(c.ID, bothy.RunRequest{Script: "echo again"}).ID); again.State != bothy.CommandCompleted || again.LeaseID == done.LeaseID {
		t.Fatalf("command after the teardown: %+v", again)
	}
	destroyAll(t, a, data)
	s.stop(t)
}

// TestE2E_StopStorm: 15 warm computers stopped at once, three rounds.
// A poll sent while a lease stops is answered from the state before its
// release, and still lists it after the agent tore it down: each lease
// must be torn down once, not started again by that stale answer (which
// left a second sandbox, supervisor and directory that a SIGTERM then
// orphaned).
func TestE2E_StopStorm(t *testing.T) {
	needSandbox(t)
	data, s, a := serveAPI(t)
	var ids []string
	for range 15 {
		ids = append(ids, a.create("storm").ID)
	}
	for range 3 {
		for _, id := range ids {
			if c := a.run(id, bothy.RunRequest{Script: "echo warm", Wait: true}); c.State != bothy.CommandCompleted {
				t.Fatalf("command on %s: %s", id, c.State)
			}
		}
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Go(func() {
				if _, err := a.c.StopComputer(a.ctx(), id); err != nil {
					t.Errorf("stop %s: %v", id, err)
				}
			})
		}
		wg.Wait()
	}
	checkNoResidue(t, data)
	destroyAll(t, a, data)
	s.stop(t)
	down := map[string]int{}
	for _, m := range regexp.MustCompile(`msg="lease torn down" agent=\S+ lease=(\S+)`).FindAllStringSubmatch(s.stderr.String(), -1) {
		down[m[1]]++
	}
	if len(down) != 3*len(ids) {
		t.Errorf("%d leases torn down, want %d", len(down), 3*len(ids))
	}
	for id, n := range down {
		if n != 1 {
			t.Errorf("lease %s torn down %d times, want once", id, n)
		}
	}
}

// leaseProcesses reads a lease's directory: the pid of its supervisor and
// the uid its bwrap sandbox runs as.
func leaseProcesses(t *testing.T, leaseDir string) (int, int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(leaseDir, "sup", "supervisor.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Handle bothy.SandboxHandle `json:"handle"`
	}
	var st struct {
		UID int `json:"uid"`
	}
	if b, err = os.ReadFile(filepath.Join(leaseDir, "lease.json")); err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err == nil {
		err = json.Unmarshal(rec.Handle.State, &st)
	}
	if err != nil || st.UID == 0 {
		t.Fatalf("the lease's record names no sandbox uid (%v): %s", err, b)
	}
	return pid, st.UID
}

// processesOf lists the live processes whose real uid is uid.
func processesOf(uid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		var zombie bool
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) > 1 && f[0] == "State:" {
				zombie = f[1] == "Z" || f[1] == "X"
			} else if len(f) > 1 && f[0] == "Uid:" {
				if f[1] == strconv.Itoa(uid) && !zombie {
					out = append(out, pid)
				}
				break
			}
		}
	}
	return out
}

// pidAlive reports whether pid runs and is no zombie.
func pidAlive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// TestE2E_SupervisorKilled: a lease's supervisor is killed (SIGKILL)
// while a command runs. The agent starts a new supervisor on the lease's
// directory, which kills what the dead one left and ends the command lost
// with the output it printed before; the next command runs on the same
// lease, a stop tears it down, and nothing is left.
func TestE2E_SupervisorKilled(t *testing.T) {
	needSandbox(t)
	data, s, a := serveAPI(t)
	c := a.create("supervisor-killed")
	mark := randomMark()
	cmd := a.run(c.ID, bothy.RunRequest{Script: "echo before; sleep 30", Env: map[string]string{"BOTHY_E2E_MARK": mark}})
	a.events(cmd.ID, 0, func(e *bothy.Event) bool { return e.Kind == bothy.EventStdout })
	waitProcesses(t, mark, func(n int) bool { return n > 0 })
	running := a.command(cmd.ID)
	supDir := filepath.Join(data, "agent", "leases", running.LeaseID, "sup")
	old := supervisorsOf(supDir)
	if len(old) != 1 {
		t.Fatalf("supervisors of %s: %v, want one", supDir, old)
	}
	if err := syscall.Kill(old[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if got := a.command(cmd.ID); bothy.CommandTerminal(got.State) {
			if got.State != bothy.CommandLost {
				t.Fatalf("the command running when its supervisor was killed ended %s, want lost", got.State)
			}
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the command is still %s 15 s after its supervisor was killed; serve's log:\n%s", got.State, s.stderr)
		}
	}
	// The new supervisor killed the dead one's commands, before the
	// stop would.
	waitProcesses(t, mark, func(n int) bool { return n == 0 })
	if got := output(a.events(cmd.ID, 0, nil)); got != "before\n" {
		t.Errorf("the lost command's output %q, want %q", got, "before\n")
	}
	if now := supervisorsOf(supDir); len(now) != 1 || now[0] == old[0] {
		t.Errorf("supervisors of %s after the kill: %v, want one new one (the killed one was %d)", supDir, now, old[0])
	}
	next := a.run(c.ID, bothy.RunRequest{Script: "echo after", Wait: true})
	if got := output(a.events(next.ID, 0, nil)); next.State != bothy.CommandCompleted || got != "after\n" || next.LeaseID != running.LeaseID {
		t.Fatalf("the next command: %s %q on lease %s, want completed %q on %s", next.State, got, next.LeaseID, "after\n", running.LeaseID)
	}
	a.stop(c.ID)
	a.waitState(c.ID, bothy.StateCold)
	checkNoResidue(t, data)
	destroyAll(t, a, data)
	s.stop(t)
}

// supervisorsOf lists the live processes whose command line runs a
// supervisor on dir (`-dir DIR`).
func supervisorsOf(dir string) []int {
	var out []int
	for _, pid := range processesMentioning(dir) {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if bytes.Contains(b, []byte("\x00-dir\x00"+dir+"\x00")) && pidAlive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

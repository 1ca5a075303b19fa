package agent

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/supervisor"
)

// commandControl is a scriptedControl that also takes command reports,
// events and commits, and records them by command.
type commandControl struct {
	*scriptedControl

	mu      sync.Mutex
	reports map[string][]*runtime.Report
	events  map[string][]bothy.Event
	commits int64
}

func (c *commandControl) Report(_ context.Context, _, id string, r *runtime.Report) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reports[id] = append(c.reports[id], r)
	return nil
}

func (c *commandControl) AppendEvents(_ context.Context, _, id string, events []bothy.Event) (*runtime.EventsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range events {
		if n := len(c.events[id]); n == 0 || e.Seq > c.events[id][n-1].Seq {
			c.events[id] = append(c.events[id], e)
		}
	}
	return &runtime.EventsResponse{LastSeq: c.events[id][len(c.events[id])-1].Seq}, nil
}

func (c *commandControl) Commit(_ context.Context, _ string, req *runtime.CommitRequest) (*bothy.Revision, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commits++
	return &bothy.Revision{Number: req.Base + 1}, nil
}

// end is the command's end report, if one was sent.
func (c *commandControl) end(id string) *runtime.Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.reports[id] {
		if r.State != bothy.RunRunning {
			return r
		}
	}
	return nil
}

// stdout is the command's stdout as the events appended so far hold it.
func (c *commandControl) stdout(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []byte
	for _, e := range c.events[id] {
		if e.Kind == bothy.EventStdout {
			out = append(out, e.Data...)
		}
	}
	return string(out)
}

// waitEnd waits, at most d, for the command's end report.
func (c *commandControl) waitEnd(t *testing.T, id string, d time.Duration) *runtime.Report {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if r := c.end(id); r != nil {
			return r
		} else if time.Now().After(deadline) {
			c.mu.Lock()
			defer c.mu.Unlock()
			t.Fatalf("command %s did not end within %s; reports %v", id, d, c.reports[id])
			return nil
		}
	}
}

func runWork(id, script string) *runtime.LeaseWork {
	w := work("lse_1", "lse_1-cred", false)
	w.Commands = []*runtime.CommandWork{{CommandID: id, Action: runtime.ActRun, Spec: &bothy.RunSpec{Script: script}}}
	return w
}

// TestAgent_SupervisorKilled: the lease's supervisor is killed (SIGKILL)
// while a command runs. The agent notices within seconds, starts a new
// supervisor on the same directory, which ends the command lost with the
// output it printed before; the next command runs on the same lease, and
// a stop completes at once.
func TestAgent_SupervisorKilled(t *testing.T) {
	t.Run("Killed", func(t *testing.T) { testSupervisorGone(t, false) })
	// A supervisor that lives on without its socket (removed) is as
	// good as dead: it is sent SIGTERM, which ends its commands cancelled
	// with their output, and replaced.
	t.Run("SocketGone", func(t *testing.T) { testSupervisorGone(t, true) })
	// No new supervisor starts: the lease is released lost, so that its
	// commands settle and the next one starts a new lease.
	t.Run("CannotReplace", testSupervisorNotReplaced)
}

func testSupervisorNotReplaced(t *testing.T) {
	e := newAgentEnv(t)
	ctl := &commandControl{scriptedControl: e.ctl, reports: map[string][]*runtime.Report{}, events: map[string][]bothy.Event{}}
	e.cfg.Control = ctl
	// The supervisor command starts a supervisor once, then fails.
	once := filepath.Join(t.TempDir(), "spawned")
	e.cfg.SupervisorCommand = []string{"/bin/sh", "-c", `[ -e "$0" ] && exit 1; : > "$0"; exec "$1" supervisor "$2" "$3"`, once, e.cfg.SupervisorCommand[0]}
	e.run(t)
	e.answer(t, 1, work("lse_1", "lse_1-cred", false))
	select {
	case <-e.ctl.ready:
	case <-time.After(time.Minute):
		t.Fatal("the lease did not become ready")
	}
	leaseDir := filepath.Join(e.dir, "leases", "lse_1")
	first := supervisorPid(t, leaseDir)
	e.supervisors = append(e.supervisors, first)
	e.answer(t, 2, runWork("cmd_1", "echo before; exec sleep 30"))
	waitFor(t, "the command prints", func() bool { return ctl.stdout("cmd_1") == "before\n" })
	procs := markedProcesses(t, leaseDir)
	t.Cleanup(func() {
		for _, pid := range procs {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	pid, _ := strconv.Atoi(first)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-e.ctl.released:
		if c.req.Disposition != bothy.LeaseLost || !strings.Contains(c.req.Error, "could not be replaced") {
			t.Errorf("released %+v, want lost as the supervisor could not be replaced", c.req)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the lease was not released within 15 s of its supervisor's death")
	}
	if _, err := os.Lstat(leaseDir); !os.IsNotExist(err) {
		t.Errorf("the lease directory remains: %v", err)
	}
}

func testSupervisorGone(t *testing.T, socketGone bool) {
	e := newAgentEnv(t)
	ctl := &commandControl{scriptedControl: e.ctl, reports: map[string][]*runtime.Report{}, events: map[string][]bothy.Event{}}
	e.cfg.Control = ctl
	a, _ := e.run(t)
	e.answer(t, 1, work("lse_1", "lse_1-cred", false))
	select {
	case <-e.ctl.ready:
	case <-time.After(time.Minute):
		t.Fatal("the lease did not become ready")
	}
	leaseDir := filepath.Join(e.dir, "leases", "lse_1")
	first := supervisorPid(t, leaseDir)
	a.mu.Lock()
	l := a.leases["lse_1"]
	a.mu.Unlock()
	l.mu.Lock()
	firstClient := l.sup
	l.mu.Unlock()
	e.supervisors = append(e.supervisors, first)

	e.answer(t, 2, runWork("cmd_1", "echo before; exec sleep 30"))
	waitFor(t, "the command prints", func() bool { return ctl.stdout("cmd_1") == "before\n" })
	// The command's process, to see the new supervisor kill it.
	procs := markedProcesses(t, leaseDir)
	if len(procs) == 0 {
		t.Fatal("no process of the command carries the lease's mark")
	}
	t.Cleanup(func() {
		for _, pid := range procs {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	pid, _ := strconv.Atoi(first)
	if socketGone {
		if err := os.Remove(supervisor.SocketPath(filepath.Join(leaseDir, "sup"))); err != nil {
			t.Fatal(err)
		}
	} else if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	r := ctl.waitEnd(t, "cmd_1", 15*time.Second)
	if socketGone {
		if r.State != bothy.RunFinished || r.Exit == nil || !r.Exit.Cancelled {
			t.Fatalf("the command running when its supervisor lost its socket ended %+v, want finished cancelled", r)
		}
	} else if r.State != bothy.RunLost {
		t.Fatalf("the command running when its supervisor died ended %+v, want lost", r)
	}
	if got := ctl.stdout("cmd_1"); got != "before\n" {
		t.Errorf("the lost command's output %q, want %q", got, "before\n")
	}
	if r.OutputDigest == "" {
		t.Errorf("the lost command's end has no output archive")
	}
	// (A supervisor stopped by SIGTERM journals the end itself, before
	// its replacement is up; a run sent before the lease has the new one
	// fails, and the control plane would ask about it later.)
	waitFor(t, "the lease has a new supervisor", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.sup != firstClient
	})
	if second := supervisorPid(t, leaseDir); second == first || !alive(second) {
		t.Errorf("supervisor %s after %s, want a new one running", second, first)
	} else {
		e.supervisors = append(e.supervisors, second)
	}
	waitFor(t, "the command's processes are killed", func() bool {
		return !slices.ContainsFunc(procs, func(pid int) bool { return alive(strconv.Itoa(pid)) })
	})

	e.answer(t, 3, runWork("cmd_2", "echo after"))
	r = ctl.waitEnd(t, "cmd_2", 15*time.Second)
	if r.State != bothy.RunFinished || r.Exit == nil || r.Exit.ExitCode != 0 || ctl.stdout("cmd_2") != "after\n" {
		t.Fatalf("the next command ended %+v with %q, want finished with exit 0 and %q", r, ctl.stdout("cmd_2"), "after\n")
	}

	e.answer(t, 4, work("lse_1", "lse_1-cred", true))
	select {
	case c := <-e.ctl.released:
		if c.req.Disposition != bothy.LeaseReleased {
			t.Errorf("released %+v, want released", c.req)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the lease was not released within 15 s of its stop")
	}
}

// markedProcesses lists the pids whose environment holds the lease
// directory's supervisor mark (MarkEnv): the processes of its commands.
func markedProcesses(t *testing.T, leaseDir string) []int {
	t.Helper()
	mark, err := os.ReadFile(filepath.Join(leaseDir, "sup", supervisor.MarkFile))
	if err != nil {
		t.Fatal(err)
	}
	want := []byte(supervisor.MarkEnv + "=" + string(mark))
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if slices.ContainsFunc(bytes.Split(b, []byte{0}), func(kv []byte) bool { return bytes.Equal(kv, want) }) {
			out = append(out, pid)
		}
	}
	return out
}

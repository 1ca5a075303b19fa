// Package chaos_test is bothy's chaos suite (docs/chaos.md): it runs the
// real `bothy serve` with real sandboxes, kills serve, supervisors and
// sandbox inits at chosen points, storms stops with SIGTERM, fills the data
// disk and stops PostgreSQL, and after each trial checks the invariants:
// no panic in serve's log, every command terminal within a deadline, no
// side effect twice, no event lost or duplicated for a completed command,
// and nothing of the data directory left on the host.
package chaos_test

import (
	"encoding/json"
	"math/rand/v2"
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
)

// TestChaos_KillServe kills serve (and its in-process agent) with SIGKILL
// at chosen moments of two computers' commands: right after the run
// request, during a cold start, mid-output and in the checkpoint after the
// command. After a restart the client sends the run request again with the
// same idempotency key; every command completes once, with its whole
// output, each event received once.
func TestChaos_KillServe(t *testing.T) {
	needSandbox(t)
	n := newNode(t, t.TempDir())
	computers := []string{n.create("kill-serve-a"), n.create("kill-serve-b")}
	var all []*work
	for _, c := range computers {
		all = append(all, n.runOK(c, 1))
	}
	// The cold-start moments are points of a lease's start on the agent:
	// acquired in the store, its directory made, its supervisor spawned.
	moments := []string{"admit", "output", "checkpoint", "cold:supervisor", "cold:directory", "cold:acquired"}
	for i := range trials(len(moments)) {
		moment := moments[i%len(moments)]
		cold := strings.HasPrefix(moment, "cold:")
		if cold {
			for _, c := range computers {
				n.must("POST", "/v1/computers/"+c+"/stop", nil, nil)
			}
		}
		var ws []*work
		for _, c := range computers {
			ws = append(ws, newWork(c, 20))
		}
		var delay time.Duration
		switch {
		case moment == "admit" || cold:
			// The run requests are in flight, or answered, when serve dies.
			var wg sync.WaitGroup
			first := make([]string, len(ws))
			for j, w := range ws {
				wg.Go(func() {
					if n.post(w) == nil {
						first[j] = w.cmd.ID
					}
				})
			}
			if cold {
				delay = n.awaitStart(t, computers[0], moment)
			} else {
				delay = time.Duration(rand.IntN(30)) * time.Millisecond
				time.Sleep(delay)
			}
			n.kill9()
			wg.Wait()
			n.restart()
			for j, w := range ws {
				n.submit(w)
				if first[j] != "" && w.cmd.ID != first[j] {
					t.Errorf("%s: the run request sent again made command %s, the first made %s", moment, w.cmd.ID, first[j])
				}
			}
		default:
			for _, w := range ws {
				n.submit(w)
			}
			if moment == "output" {
				ws[0].events.waitFor(t, "output", terminalWithin, seqAtLeast(5))
				delay = time.Duration(rand.IntN(50)) * time.Millisecond
			} else {
				ws[0].events.waitFor(t, "exit event", terminalWithin, exited)
				delay = time.Duration(rand.IntN(100)) * time.Millisecond
			}
			time.Sleep(delay)
			n.kill9()
			n.restart()
		}
		t.Logf("trial %d: serve killed at %s, %v in", i+1, moment, delay)
		for _, w := range ws {
			n.checkCompleted(w)
		}
		all = append(all, ws...)
		if t.Failed() {
			break
		}
	}
	n.checkOnce(all)
	n.finish()
}

// TestChaos_KillSupervisor kills a lease's supervisor with SIGKILL while a
// command runs in it: that command must end lost (not stay running), a
// command of another computer is untouched, and the computer's next
// command runs.
func TestChaos_KillSupervisor(t *testing.T) {
	needSandbox(t)
	n := newNode(t, t.TempDir())
	a, b := n.create("kill-sup-a"), n.create("kill-sup-b")
	once := []*work{n.runOK(a, 1), n.runOK(b, 1)}
	var maybe []*work
	for i := range trials(1) {
		victim, other := newWork(a, 200), newWork(b, 40)
		n.submit(victim)
		n.submit(other)
		victim.events.waitFor(t, "output", terminalWithin, seqAtLeast(3))
		pid := supervisorOf(t, n, n.command(victim.cmd.ID).LeaseID)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		t.Logf("trial %d: killed supervisor %d of %s", i+1, pid, victim.cmd.ID)
		c := n.waitTerminal(victim.cmd.ID, terminalWithin)
		if c.State != bothy.CommandLost {
			t.Errorf("the command whose supervisor was killed ended %s (%q), want lost", c.State, c.Error)
		}
		victim.events.check(t, c, terminalWithin)
		n.checkCompleted(other)
		once = append(once, other, n.runOK(a, 3))
		maybe = append(maybe, victim)
		if t.Failed() {
			break
		}
	}
	n.checkOnce(once, maybe...)
	n.finish()
}

// awaitStart waits until computer's lease has reached point of its start
// (a cold-start moment of TestChaos_KillServe) and returns how long that
// took after the run request.
func (n *node) awaitStart(t *testing.T, computer, point string) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < terminalWithin {
		var c bothy.Computer
		if err := n.do("GET", "/v1/computers/"+computer, nil, &c); err == nil && c.State == bothy.StateStarting {
			var dirs []string
			if point != "cold:acquired" {
				dirs, _ = filepath.Glob(filepath.Join(n.data, "agent", "leases", "*"))
			}
			if point == "cold:supervisor" {
				dirs, _ = filepath.Glob(filepath.Join(n.data, "agent", "leases", "*", "sup", "supervisor.pid"))
			}
			if point == "cold:acquired" || len(dirs) > 0 {
				return time.Since(start)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("the lease of %s did not reach %s within %v", computer, point, terminalWithin)
	return 0
}

// supervisorOf returns the pid of lease's supervisor, which it wrote in
// the lease's directory, checking that it runs and names the directory.
func supervisorOf(t *testing.T, n *node, lease string) int {
	t.Helper()
	dir := filepath.Join(n.data, "agent", "leases", lease)
	b, err := os.ReadFile(filepath.Join(dir, "sup", "supervisor.pid"))
	if err != nil {
		t.Fatalf("supervisor of %s: %v", lease, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if !alive(pid) || !names(cmdline, dir) {
		t.Fatalf("supervisor %d of %s does not run or does not name %s: %q", pid, lease, dir, cmdline)
	}
	return pid
}

// TestChaos_KillSandboxInit kills a lease's sandbox init (the sandbox's
// pid 1 on the host) while a command runs in it: the command ends with
// sandbox_lost, and the computer's next command runs on a new lease.
func TestChaos_KillSandboxInit(t *testing.T) {
	needSandbox(t)
	n := newNode(t, t.TempDir())
	a, b := n.create("kill-init-a"), n.create("kill-init-b")
	once := []*work{n.runOK(a, 1), n.runOK(b, 1)}
	var maybe []*work
	for i := range trials(1) {
		victim, other := newWork(a, 200), newWork(b, 40)
		n.submit(victim)
		n.submit(other)
		victim.events.waitFor(t, "output", terminalWithin, seqAtLeast(3))
		lease := n.command(victim.cmd.ID).LeaseID
		holder := sandboxInit(t, n, lease)
		if err := syscall.Kill(holder, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		t.Logf("trial %d: killed sandbox init %d of %s", i+1, holder, lease)
		for j := 0; alive(holder); j++ {
			if j == 2000 {
				t.Fatalf("the sandbox's init %d outlives SIGKILL", holder)
			}
			time.Sleep(5 * time.Millisecond)
		}
		c := n.waitTerminal(victim.cmd.ID, terminalWithin)
		if !c.SandboxLost {
			t.Errorf("the command whose sandbox died ended %s exit %v (%q) without sandbox_lost", c.State, c.ExitCode, c.Error)
		}
		victim.events.check(t, c, terminalWithin)
		n.checkCompleted(other)
		next := n.runOK(a, 3)
		if nc := n.command(next.cmd.ID); nc.LeaseID == lease || nc.Generation <= c.Generation {
			t.Errorf("the next command ran on lease %s generation %d, want a new lease after %s generation %d", nc.LeaseID, nc.Generation, lease, c.Generation)
		}
		once = append(once, other, next)
		maybe = append(maybe, victim)
		if t.Failed() {
			break
		}
	}
	n.checkOnce(once, maybe...)
	n.finish()
}

// sandboxInit returns the host pid of lease's sandbox init, as its record
// names it.
func sandboxInit(t *testing.T, n *node, lease string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.data, "agent", "leases", lease, "lease.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Handle struct {
			State struct {
				Holder int `json:"holder"`
			} `json:"state"`
		} `json:"handle"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.Handle.State.Holder <= 0 || !alive(rec.Handle.State.Holder) {
		t.Fatalf("lease record %s names no live sandbox init: %v", b, err)
	}
	return rec.Handle.State.Holder
}

// TestChaos_StopStormSIGTERM stops three warm computers at once and sends
// serve SIGTERM 0.1–0.5 s later, while the stops run: serve exits cleanly,
// and after a restart every computer's next command completes and no
// supervisor is left of a lease that no computer holds.
func TestChaos_StopStormSIGTERM(t *testing.T) {
	needSandbox(t)
	n := newNode(t, t.TempDir())
	var ids []string
	for _, l := range []string{"storm-a", "storm-b", "storm-c"} {
		ids = append(ids, n.create(l))
	}
	var once []*work
	for i := range trials(1) {
		for _, id := range ids {
			once = append(once, n.runOK(id, 1))
		}
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Go(func() { n.do("POST", "/v1/computers/"+id+"/stop", nil, nil) })
		}
		delay := time.Duration(100+rand.IntN(400)) * time.Millisecond
		time.Sleep(delay)
		t.Logf("trial %d: SIGTERM %v after the stops", i+1, delay)
		n.term()
		wg.Wait()
		n.observe()
		n.restart()
		held := map[string]bool{}
		for _, id := range ids {
			w := n.runOK(id, 3)
			once = append(once, w)
			held[n.command(w.cmd.ID).LeaseID] = true
		}
		checkNoOrphans(t, n, held)
		if t.Failed() {
			break
		}
	}
	n.checkOnce(once)
	n.finish()
}

// checkNoOrphans fails if, within 20 s, a supervisor of n's data directory
// still runs for a lease that is not in held.
func checkNoOrphans(t *testing.T, n *node, held map[string]bool) {
	t.Helper()
	var orphans []string
	for range 200 {
		orphans = nil
		for lease, pid := range supervisors(n.data) {
			if !held[lease] {
				orphans = append(orphans, lease+" (pid "+strconv.Itoa(pid)+")")
			}
		}
		if len(orphans) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	slices.Sort(orphans)
	t.Errorf("supervisors of leases no computer holds: %v", orphans)
}

// supervisors returns the live supervisor processes of data, by the lease
// whose directory their command line names.
func supervisors(data string) map[string]int {
	out := map[string]int{}
	prefix := filepath.Join(data, "agent", "leases") + "/"
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "supervisor") && !slices.Contains(args, "supervisor") {
			continue
		}
		for _, a := range args {
			if rest, ok := strings.CutPrefix(a, prefix); ok {
				out[strings.SplitN(rest, "/", 2)[0]] = pid
			}
		}
	}
	return out
}

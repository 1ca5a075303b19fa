package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/process"
	"github.com/bothyhq/bothy/runtime"
)

// TestAgent_StopFinishesAfterRunEnds: the agent's context ends (serve's
// SIGTERM) just after an answer asked a lease to stop. The stop must not
// run under that context: it checkpoints and reports the lease released,
// not quarantined with its final checkpoint cancelled, before Run
// returns.
func TestAgent_StopFinishesAfterRunEnds(t *testing.T) {
	e := newAgentEnv(t)
	_, stop := e.run(t)
	e.answer(t, 1, work("lse_1", "lse_1-cred", false))
	select {
	case <-e.ctl.ready:
	case <-time.After(time.Minute):
		t.Fatal("the lease did not become ready")
	}
	leaseDir := filepath.Join(e.dir, "leases", "lse_1")
	pid := supervisorPid(t, leaseDir)
	e.supervisors = append(e.supervisors, pid)
	e.next(t)
	e.reply(t, 2, work("lse_1", "lse_1-cred", true))
	stop() // waits for Run, which drains
	select {
	case rc := <-e.ctl.released:
		if rc.req.Disposition != bothy.LeaseReleased {
			t.Errorf("the lease was reported %s (%s), want released", rc.req.Disposition, rc.req.Error)
		}
	default:
		t.Fatal("Run returned before the stop reported the lease released")
	}
	if _, err := os.Lstat(leaseDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lease directory remains: %v", err)
	}
	if alive(pid) {
		t.Errorf("supervisor %s still runs after the stop", pid)
	}
}

// TestAgent_TeardownKeepsDirWhileSupervisorRuns: a supervisor that ends
// neither at shutdown nor at SIGTERM still holds the lease's directory.
// The teardown must not delete the directory under it (which left
// supervisors running in a deleted directory, which no agent finds
// again): it keeps it as residue, and a later teardown, once the process
// is gone, removes it.
func TestAgent_TeardownKeepsDirWhileSupervisorRuns(t *testing.T) {
	old := supervisorGoneTimeout
	supervisorGoneTimeout = 200 * time.Millisecond
	t.Cleanup(func() { supervisorGoneTimeout = old })
	e := newAgentEnv(t)
	a, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	newRecovered := func() *lease {
		l := newLease(a, work("lse_1", "", false))
		l.work = nil // rebuilt from disk: no credential, nothing reported
		l.rec.Workspace = e.cfg.Workspace
		return l
	}
	l := newRecovered()
	supDir := filepath.Join(l.dir, "sup")
	if err := os.MkdirAll(filepath.Join(l.dir, "ws"), 0o700); err != nil {
		t.Fatal(err)
	} else if err := os.MkdirAll(supDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A stubborn supervisor: it holds the directory's lock, and SIGTERM
	// does not end it.
	cmd := exec.Command("sh", "-c", `trap "" TERM; exec flock -o supervisor.lock sleep 120`)
	cmd.Dir = supDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }
	t.Cleanup(kill)
	pid := strconv.Itoa(cmd.Process.Pid)
	if err := os.WriteFile(filepath.Join(supDir, "supervisor.pid"), []byte(pid+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stub holds the lock", func() bool {
		f, err := os.Open(filepath.Join(supDir, "supervisor.lock"))
		if err != nil {
			return false
		}
		defer f.Close()
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			return false
		}
		return true
	})

	l.teardown(context.Background(), bothy.LeaseReleased, "", false)
	if _, err := os.Lstat(l.dir); err != nil {
		t.Fatalf("the teardown removed the directory of a supervisor that still runs: %v", err)
	}
	if !strings.Contains(e.logs.String(), "keeping its directory") {
		t.Errorf("the teardown did not say it kept the directory")
	}

	kill()
	newRecovered().teardown(context.Background(), bothy.LeaseReleased, "", false)
	if _, err := os.Lstat(l.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lease directory remains once its supervisor is gone: %v", err)
	}
}

// TestAgent_QuarantinedLeaseAtNextStart: a lease marked quarantined on
// disk (its final checkpoint failed) whose release report was lost is
// still listed to the next agent. That agent must not start it again
// over its kept layer (its sandbox and uid are gone): it reports it
// quarantined again, stopping what of it still runs, and the agent after,
// which is not listed it, removes its layers.
func TestAgent_QuarantinedLeaseAtNextStart(t *testing.T) {
	e := newAgentEnv(t)
	_, stop := e.run(t)
	e.answer(t, 1, work("lse_1", "lse_1-cred", false))
	select {
	case <-e.ctl.ready:
	case <-time.After(time.Minute):
		t.Fatal("the lease did not become ready")
	}
	leaseDir := filepath.Join(e.dir, "leases", "lse_1")
	pid := supervisorPid(t, leaseDir)
	e.supervisors = append(e.supervisors, pid)
	stop()
	// As a quarantine whose report was lost: lease.json marked.
	path := filepath.Join(leaseDir, "lease.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	rec["quarantined"] = "final checkpoint failed: test"
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	e.prov = &countingProvider{Provider: process.New()}
	e.cfg.Providers = map[string]bothy.Provider{process.Name: e.prov}
	a, stop := e.run(t)
	e.answer(t, 2, work("lse_1", "lse_1-cred2", false))
	select {
	case rc := <-e.ctl.released:
		if rc.req.Disposition != bothy.LeaseQuarantined || rc.cred != "lse_1-cred2" {
			t.Errorf("reported %s with %q, want quarantined with the new credential", rc.req.Disposition, rc.cred)
		}
	case <-time.After(time.Minute):
		t.Fatal("the quarantined lease was not reported")
	}
	waitFor(t, "the lease is forgotten", func() bool { return !a.holds("lse_1") })
	if starts, stopped := e.prov.counts(); starts != 0 || !slices.Equal(stopped, []string{"lse_1"}) {
		t.Errorf("the provider started %d sandboxes and stopped %v, want none and [lse_1]", starts, stopped)
	}
	if alive(pid) {
		t.Errorf("supervisor %s still runs", pid)
	}
	if _, err := os.Lstat(filepath.Join(leaseDir, "ws")); err != nil {
		t.Errorf("the quarantined lease's layer is gone: %v", err)
	}
	stop()

	a, _ = e.run(t)
	if req := e.answer(t, 3); !slices.Equal(heldIDs(req), []string{"lse_1"}) {
		t.Fatalf("the next agent holds %v, want [lse_1]", heldIDs(req))
	}
	waitFor(t, "the lease is discarded", func() bool { return !a.holds("lse_1") })
	if _, err := os.Lstat(leaseDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the quarantined lease's directory remains: %v", err)
	}
}

// blockedCommit is a control plane whose commits never answer, until the
// caller's context ends.
type blockedCommit struct{ *scriptedControl }

func (blockedCommit) Commit(ctx context.Context, _ string, _ *runtime.CommitRequest) (*bothy.Revision, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestAgent_StopCutAtDrainDeadline: a stop whose final commit does not
// finish within the drain deadline is not quarantined nor torn down: the
// lease stays whole on disk (its record, layer and supervisor) for the
// next agent, which resumes it.
func TestAgent_StopCutAtDrainDeadline(t *testing.T) {
	e := newAgentEnv(t)
	e.cfg.Control = blockedCommit{e.ctl}
	e.cfg.DrainTimeout = 300 * time.Millisecond
	_, stop := e.run(t)
	e.answer(t, 1, work("lse_1", "lse_1-cred", false))
	select {
	case <-e.ctl.ready:
	case <-time.After(time.Minute):
		t.Fatal("the lease did not become ready")
	}
	leaseDir := filepath.Join(e.dir, "leases", "lse_1")
	pid := supervisorPid(t, leaseDir)
	e.supervisors = append(e.supervisors, pid)
	if err := os.WriteFile(filepath.Join(leaseDir, "ws", "tree", "new.txt"), []byte("not committed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.next(t)
	e.reply(t, 2, work("lse_1", "lse_1-cred", true))
	stop()
	select {
	case rc := <-e.ctl.released:
		t.Fatalf("the lease was reported %s (%s), want it left whole", rc.req.Disposition, rc.req.Error)
	default:
	}
	if !alive(pid) {
		t.Errorf("supervisor %s ended", pid)
	}
	for _, p := range []string{"lease.json", "ws/tree/new.txt"} {
		if _, err := os.Stat(filepath.Join(leaseDir, p)); err != nil {
			t.Errorf("the lease's %s is gone: %v", p, err)
		}
	}
	if !strings.Contains(e.logs.String(), "leaving it whole for the next start") {
		t.Errorf("the agent did not say it left the lease whole")
	}
	// The next agent takes it over; it is not listed, so it is removed.
	a, _ := e.run(t)
	if req := e.answer(t, 3); !slices.Equal(heldIDs(req), []string{"lse_1"}) {
		t.Fatalf("the next agent holds %v, want [lse_1]", heldIDs(req))
	}
	waitFor(t, "the lease is torn down", func() bool { return !a.holds("lse_1") })
	if alive(pid) {
		t.Errorf("supervisor %s still runs", pid)
	}
}

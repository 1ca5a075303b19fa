package control_test

import (
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/control"
	"github.com/bothyhq/bothy/runtime"
)

// restart replaces the fixture's controller by a new process's over the
// same store, and runs its start-up pass.
func (f *fixture) restart() {
	f.t.Helper()
	f.c = control.New(f.s, control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: agentToken})
	if err := f.c.Reconcile(f.ctx); err != nil {
		f.t.Fatal(err)
	}
}

// pollAs polls as agent, holding held, and returns the answer's work by
// computer id.
func (f *fixture) pollAs(agent string, held ...runtime.HeldLease) map[string]*runtime.LeaseWork {
	f.t.Helper()
	resp, err := f.c.Poll(f.ctx, agentToken, &runtime.PollRequest{AgentID: agent, Leases: held})
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]*runtime.LeaseWork{}
	for _, w := range resp.Leases {
		out[w.ComputerID] = w
	}
	return out
}

func (f *fixture) computer(id string) {
	f.t.Helper()
	if err := f.s.CreateComputer(f.ctx, &bothy.Computer{ID: id, TenantID: "t1", Owner: "o", Profile: "standard", State: bothy.StateCold}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) run(computerID string) *bothy.Command {
	f.t.Helper()
	cmd, created, err := f.c.RunCommand(f.ctx, "t1", computerID, bothy.RunRequest{Argv: []string{"true"}})
	if err != nil || !created {
		f.t.Fatal(created, err)
	}
	return cmd
}

func (f *fixture) lease(computerID string) *bothy.Lease {
	f.t.Helper()
	l, err := f.s.ActiveLease(f.ctx, "t1", computerID)
	if err != nil {
		f.t.Fatalf("active lease of %s: %v", computerID, err)
	}
	return l
}

// TestRestart_UnheldLeaseReleased: a computer's first command started a
// lease for agent b, and the control plane died before b started it (or
// b tore it down and could not report it). At b's first poll to the new
// process, which does not list that lease, it is released at once (lost),
// not when its TTL runs out, and the admitted command gets a lease of the
// next generation in that answer or the next. A lease b holds, though
// still starting, is adopted; a lease of an agent that has not polled the
// new process yet, or of none known, keeps its TTL.
func TestRestart_UnheldLeaseReleased(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		for _, id := range []string{"cmp2", "cmp3", "cmp4"} {
			f.computer(id)
		}
		f.run("cmp4") // before any agent polled: assigned to none (a claims it, in memory only)
		f.pollAs("a")
		f.pollAs("b")
		cmd := f.run("cmp1") // placed on the agent with the fewest leases, then by id
		f.run("cmp2")
		f.run("cmp3")
		unheld, ofA, starting, ofNone := f.lease("cmp1"), f.lease("cmp2"), f.lease("cmp3"), f.lease("cmp4")
		if unheld.Host != "b" || ofA.Host != "a" || starting.Host != "b" || ofNone.Host != "" {
			t.Fatalf("placement: cmp1 %q, cmp2 %q, cmp3 %q, cmp4 %q", unheld.Host, ofA.Host, starting.Host, ofNone.Host)
		}

		f.restart()
		held := runtime.HeldLease{LeaseID: starting.ID, TenantID: "t1", Generation: starting.Generation, Starting: true}
		work := f.pollAs("b", held)
		got, err := s.FindLease(f.ctx, "t1", unheld.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.ReleasedAt.IsZero() || got.Disposition != bothy.LeaseLost {
			t.Fatalf("the lease agent b does not hold, after its first poll: released %v, disposition %q; want lost at once", got.ReleasedAt, got.Disposition)
		}
		w := work["cmp1"]
		if w == nil {
			w = f.pollAs("b", held)["cmp1"]
		}
		if w == nil || w.Generation != unheld.Generation+1 {
			t.Fatalf("the admitted command's computer has no new lease: %+v", w)
		}
		if err := f.c.Ready(f.ctx, w.Credential, &runtime.ReadyRequest{}); err != nil {
			t.Fatal(err)
		}
		w = f.pollAs("b", held, runtime.HeldLease{LeaseID: w.LeaseID, TenantID: "t1", Generation: w.Generation})["cmp1"]
		if len(w.Commands) != 1 || w.Commands[0].CommandID != cmd.ID || w.Commands[0].Action != runtime.ActRun {
			t.Fatalf("the new lease is sent %+v, want the admitted command to run", w.Commands)
		}
		if w := work["cmp3"]; w == nil || w.LeaseID != starting.ID {
			t.Errorf("the lease b holds while it starts is not adopted: %+v", w)
		}
		for name, l := range map[string]*bothy.Lease{"of agent a, which has not polled": ofA, "starting on b": starting, "assigned to no agent": ofNone} {
			if got, err := s.FindLease(f.ctx, "t1", l.ID); err != nil || !got.ReleasedAt.IsZero() {
				t.Errorf("the lease %s was released (%v, %q)", name, err, got.Disposition)
			}
		}
	})
}

// TestRestart_DispatchToResumingLease: the control plane died with a
// warm computer's command admitted (or dispatched) and its lease ready.
// The restarted agent found the lease on disk and resumes it: until it
// reports the lease ready it takes no command (agent.lease.update drops
// them), so the new process dispatches nothing to it before, and the
// command runs at the answer after Ready, not after the acknowledgement
// timeout.
func TestRestart_DispatchToResumingLease(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		first := f.run("cmp1")
		l := f.ready()
		if len(l.Commands) != 1 || l.Commands[0].CommandID != first.ID {
			t.Fatalf("dispatch: %+v", l.Commands)
		}
		zero := bothy.Exit{}
		if err := f.c.Report(f.ctx, l.Credential, first.ID, &runtime.Report{State: bothy.RunFinished, Exit: &zero}); err != nil {
			t.Fatal(err)
		}
		cmd := f.run("cmp1") // admitted; the crash comes before its dispatch

		f.restart()
		held := runtime.HeldLease{LeaseID: l.LeaseID, TenantID: "t1", Generation: l.Generation, Starting: true}
		w := f.pollAs("a", held)["cmp1"]
		if w == nil {
			t.Fatal("the held lease is not adopted")
		}
		// What the resuming agent drops, it must not have been sent.
		for _, cw := range w.Commands {
			if cw.Action == runtime.ActRun {
				t.Errorf("a lease its agent is still resuming is sent %s %s", cw.Action, cw.CommandID)
			}
		}
		if err := f.c.Ready(f.ctx, w.Credential, &runtime.ReadyRequest{}); err != nil {
			t.Fatal(err)
		}
		held.Starting = false
		w = f.pollAs("a", held)["cmp1"]
		if len(w.Commands) != 1 || w.Commands[0].CommandID != cmd.ID || w.Commands[0].Action != runtime.ActRun {
			got, _ := s.FindCommand(f.ctx, "t1", cmd.ID)
			t.Fatalf("after the resumed lease is ready it is sent %+v (the command is %s), want it to run now", w.Commands, got.State)
		}
	})
}

// TestRestart_DispatchedAskedAtFirstPoll: a command dispatched before
// the crash, whose agent's first poll to the new process comes before
// the start-up pass, is asked about in the first answer.
func TestRestart_DispatchedAskedAtFirstPoll(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		cmd := f.run("cmp1")
		l := f.ready()
		if len(l.Commands) != 1 || l.Commands[0].Action != runtime.ActRun {
			t.Fatalf("dispatch: %+v", l.Commands)
		}
		// The new process's first poll comes before its start-up pass.
		f.c = control.New(s, control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: agentToken})
		held := runtime.HeldLease{LeaseID: l.LeaseID, TenantID: "t1", Generation: l.Generation}
		w := f.pollAs("a", held)["cmp1"]
		if w == nil || len(w.Commands) == 0 {
			t.Fatalf("after the restart the lease is sent %+v, want a status question", w)
		}
		for _, cw := range w.Commands {
			if cw.CommandID != cmd.ID || cw.Action != runtime.ActStatus {
				t.Fatalf("after the restart the lease is sent %s %s, want a status question", cw.Action, cw.CommandID)
			}
		}
		if err := f.c.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunNeverSeen}); err != nil {
			t.Fatal(err)
		}
		if w = f.pollAs("a", held)["cmp1"]; len(w.Commands) != 1 || w.Commands[0].Action != runtime.ActRun {
			t.Fatalf("after never_seen: %+v, want it dispatched once more", w.Commands)
		}
	})
}

// TestRestart_AdmittedWithoutLease: the control plane died between
// admitting a cold computer's first command and reserving its lease. The
// new process's start-up pass reserves it, and an agent's poll starts it.
func TestRestart_AdmittedWithoutLease(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		cmd := &bothy.Command{ID: "cmd_admitted", TenantID: "t1", ComputerID: "cmp1", Argv: []string{"true"}}
		if _, err := s.CreateCommand(f.ctx, cmd); err != nil {
			t.Fatal(err)
		}
		f.restart()
		w := f.poll()
		if w == nil {
			t.Fatal("after the restart the computer with an admitted command has no lease")
		}
		if err := f.c.Ready(f.ctx, w.Credential, &runtime.ReadyRequest{}); err != nil {
			t.Fatal(err)
		}
		if w = f.poll(runtime.HeldLease{LeaseID: w.LeaseID, TenantID: "t1", Generation: w.Generation}); len(w.Commands) != 1 || w.Commands[0].CommandID != cmd.ID {
			t.Fatalf("the new lease is sent %+v", w.Commands)
		}
	})
}

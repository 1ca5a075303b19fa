package control_test

import (
	"context"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/control"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/storetest"
)

// stores runs fn on SQLite and on PostgreSQL.
func stores(t *testing.T, fn func(t *testing.T, s bothy.Store)) { storetest.Each(t, fn) }

const agentToken = "agent-token-for-tests"

// fixture is a controller over a store with one tenant and computer, and
// a fake agent that speaks the protocol by hand.
type fixture struct {
	t    *testing.T
	ctx  context.Context
	s    bothy.Store
	c    *control.Controller
	comp *bothy.Computer
}

func newFixture(t *testing.T, s bothy.Store) *fixture {
	ctx := context.Background()
	tn, err := bothy.NewTenant("t1", "t1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	comp := &bothy.Computer{ID: "cmp1", TenantID: "t1", Owner: "o", Profile: "standard", State: bothy.StateCold}
	if err := s.CreateComputer(ctx, comp); err != nil {
		t.Fatal(err)
	}
	c := control.New(s, control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: agentToken})
	return &fixture{t: t, ctx: ctx, s: s, c: c, comp: comp}
}

// ready polls as agent "a", reports the fixture computer's lease ready
// and polls again: the answer dispatches its admitted commands.
func (f *fixture) ready() *runtime.LeaseWork {
	f.t.Helper()
	w := f.poll()
	if err := f.c.Ready(f.ctx, w.Credential, &runtime.ReadyRequest{Host: "h"}); err != nil {
		f.t.Fatal(err)
	}
	return f.poll()
}

// poll polls as agent "a" and returns the work of the fixture's computer.
func (f *fixture) poll(held ...runtime.HeldLease) *runtime.LeaseWork {
	f.t.Helper()
	resp, err := f.c.Poll(f.ctx, agentToken, &runtime.PollRequest{AgentID: "a", Leases: held})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, w := range resp.Leases {
		if w.ComputerID == f.comp.ID {
			return w
		}
	}
	return nil
}

func code(err error) string { return bothy.ErrorCode(err) }

// TestStaleGeneration: a runtime of generation g, once the computer moved
// to g+1, can neither commit a revision, append events, nor finish a
// command, of its own generation or of the new one.
func TestStaleGeneration(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		cmd1, created, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}})
		if err != nil || !created {
			t.Fatal(created, err)
		}
		w1 := f.poll()
		if w1 == nil || w1.Generation != 1 {
			t.Fatalf("first lease: %+v", w1)
		}
		if err := f.c.Ready(f.ctx, w1.Credential, &runtime.ReadyRequest{Host: "h"}); err != nil {
			t.Fatal(err)
		}
		w1 = f.poll()
		if len(w1.Commands) != 1 || w1.Commands[0].Action != runtime.ActRun || w1.Commands[0].CommandID != cmd1.ID {
			t.Fatalf("dispatch: %+v", w1.Commands)
		}
		// Dispatched once: the next poll does not send it again.
		if w := f.poll(); len(w.Commands) != 0 {
			t.Fatalf("second poll sends %+v", w.Commands)
		}
		cred1 := w1.Credential
		if err := f.c.Report(f.ctx, cred1, cmd1.ID, &runtime.Report{State: bothy.RunRunning}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.c.AppendEvents(f.ctx, cred1, cmd1.ID, []bothy.Event{{Seq: 1, Kind: bothy.EventStdout, Data: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		root := "0000000000000000000000000000000000000000000000000000000000000001"
		if _, err := f.c.Commit(f.ctx, cred1, &runtime.CommitRequest{Base: 0, RootDigest: root}); err != nil {
			t.Fatal(err)
		}

		// The lease ends (its runtime is declared gone) and a new command
		// starts generation 2.
		if err := f.c.Released(f.ctx, cred1, &runtime.ReleaseRequest{Disposition: bothy.LeaseLost}); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.FindCommand(f.ctx, "t1", cmd1.ID); got.State != bothy.CommandLost {
			t.Fatalf("the running command of the ended lease is %s, want lost", got.State)
		}
		cmd2, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		w2 := f.poll()
		if w2 == nil || w2.Generation != 2 {
			t.Fatalf("second lease: %+v", w2)
		}
		if err := f.c.Ready(f.ctx, w2.Credential, &runtime.ReadyRequest{Host: "h"}); err != nil {
			t.Fatal(err)
		}
		if w2 = f.poll(); len(w2.Commands) != 1 || w2.Commands[0].CommandID != cmd2.ID {
			t.Fatalf("generation 2 dispatch: %+v", w2.Commands)
		}

		// Generation 1 is stale for everything.
		if _, err := f.c.Commit(f.ctx, cred1, &runtime.CommitRequest{Base: 1, RootDigest: root}); code(err) != bothy.ECONFLICT {
			t.Errorf("stale commit: %v", err)
		}
		if _, err := f.c.AppendEvents(f.ctx, cred1, cmd1.ID, []bothy.Event{{Seq: 2, Kind: bothy.EventStdout, Data: []byte("y")}}); code(err) != bothy.ECONFLICT {
			t.Errorf("stale events on its own command: %v", err)
		}
		if _, err := f.c.AppendEvents(f.ctx, cred1, cmd2.ID, []bothy.Event{{Seq: 1, Kind: bothy.EventStdout, Data: []byte("y")}}); code(err) != bothy.ECONFLICT {
			t.Errorf("stale events on the new generation's command: %v", err)
		}
		zero := bothy.Exit{}
		for _, id := range []string{cmd1.ID, cmd2.ID} {
			if err := f.c.Report(f.ctx, cred1, id, &runtime.Report{State: bothy.RunFinished, Exit: &zero}); code(err) != bothy.ECONFLICT {
				t.Errorf("stale finish of %s: %v", id, err)
			}
		}
		if got, _ := s.FindCommand(f.ctx, "t1", cmd2.ID); got.State != bothy.CommandDispatched || got.LastSeq != 0 {
			t.Errorf("the stale runtime changed the new command: %s, last seq %d", got.State, got.LastSeq)
		}
		if comp, _ := s.FindComputer(f.ctx, "t1", "cmp1"); comp.Revision != 1 {
			t.Errorf("revision %d after a stale commit, want 1", comp.Revision)
		}
		// The current generation works.
		cred2 := w2.Credential
		if err := f.c.Report(f.ctx, cred2, cmd2.ID, &runtime.Report{State: bothy.RunRunning}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.c.AppendEvents(f.ctx, cred2, cmd2.ID, []bothy.Event{{Seq: 1, Kind: bothy.EventExit, Fields: `{"exit_code":0}`}}); err != nil {
			t.Fatal(err)
		}
		if err := f.c.Report(f.ctx, cred2, cmd2.ID, &runtime.Report{State: bothy.RunFinished, Exit: &zero, LastSeq: 1}); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.FindCommand(f.ctx, "t1", cmd2.ID); got.State != bothy.CommandCompleted || got.ExitCode == nil || *got.ExitCode != 0 {
			t.Errorf("the current generation's result: %+v", got)
		}
		// A forged credential is refused.
		if _, err := f.c.AppendEvents(f.ctx, cred2+"x", cmd2.ID, nil); code(err) != bothy.EUNAUTHORIZED {
			t.Errorf("forged credential: %v", err)
		}
	})
}

// TestMayHaveStarted: a command left dispatched by a crashed control plane
// is only asked about, never sent again, and is dispatched once more only
// when the same generation answers that it never saw it.
func TestMayHaveStarted(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		cmd, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		w := f.poll()
		f.c.Ready(f.ctx, w.Credential, &runtime.ReadyRequest{})
		if w = f.poll(); len(w.Commands) != 1 || w.Commands[0].Action != runtime.ActRun {
			t.Fatalf("dispatch: %+v", w.Commands)
		}
		held := runtime.HeldLease{LeaseID: w.LeaseID, TenantID: "t1", Generation: w.Generation}

		// A new control plane process over the same store.
		c2 := control.New(s, control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: agentToken})
		if err := c2.Reconcile(f.ctx); err != nil {
			t.Fatal(err)
		}
		f.c = c2
		if got, _ := s.FindCommand(f.ctx, "t1", cmd.ID); got.State != bothy.CommandMayHaveStarted {
			t.Fatalf("after restart: %s", got.State)
		}
		w = f.poll(held)
		if len(w.Commands) != 1 || w.Commands[0].Action != runtime.ActStatus {
			t.Fatalf("after restart the runtime is sent %+v, want one status question", w.Commands)
		}
		if err := c2.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunNeverSeen}); err != nil {
			t.Fatal(err)
		}
		if w = f.poll(held); len(w.Commands) != 1 || w.Commands[0].Action != runtime.ActRun {
			t.Fatalf("after never_seen: %+v, want it dispatched once more", w.Commands)
		}
		if w = f.poll(held); len(w.Commands) != 0 {
			t.Fatalf("dispatched twice: %+v", w.Commands)
		}
		// A never_seen answer about a command that is running is refused.
		if err := c2.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunRunning}); err != nil {
			t.Fatal(err)
		}
		if err := c2.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunNeverSeen}); code(err) != bothy.ECONFLICT {
			t.Fatalf("never_seen of a running command: %v", err)
		}
	})
}

// TestPoll_AgentToken: only the agent token polls, and a lease credential
// of one computer cannot report on another computer's command.
func TestPoll_AgentToken(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		for _, tok := range []string{"", "wrong", agentToken + "x"} {
			if _, err := f.c.Poll(f.ctx, tok, &runtime.PollRequest{AgentID: "a"}); code(err) != bothy.EUNAUTHORIZED {
				t.Errorf("poll with token %q: %v", tok, err)
			}
		}
		// A store token bound to one agent polls as that agent only, until
		// it is revoked or expires; API tokens are no agent tokens.
		tok, secret, err := s.CreateToken(f.ctx, "t1", "agents", []string{"agent:a"}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.c.Poll(f.ctx, secret, &runtime.PollRequest{AgentID: "a"}); err != nil {
			t.Errorf("poll as a with an agent:a token: %v", err)
		}
		if _, err := f.c.Poll(f.ctx, secret, &runtime.PollRequest{AgentID: "b"}); code(err) != bothy.EUNAUTHORIZED {
			t.Errorf("poll as b with an agent:a token: %v", err)
		}
		_, expired, err := s.CreateToken(f.ctx, "t1", "agents", []string{"agent:a"}, time.Now().Add(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		_, api, err := s.CreateToken(f.ctx, "t1", "o", []string{bothy.ScopeAdmin}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeToken(f.ctx, "t1", tok.ID); err != nil {
			t.Fatal(err)
		}
		for name, tk := range map[string]string{"revoked": secret, "expired": expired, "admin API token": api} {
			if _, err := f.c.Poll(f.ctx, tk, &runtime.PollRequest{AgentID: "a"}); code(err) != bothy.EUNAUTHORIZED {
				t.Errorf("poll with the %s: %v", name, err)
			}
		}
		if _, _, err := s.CreateToken(f.ctx, "t1", "agents", []string{"agent:a", "computers:read"}, time.Time{}); code(err) != bothy.EINVALID {
			t.Errorf("an agent scope beside another: %v", err)
		}

		other := &bothy.Computer{ID: "cmp2", TenantID: "t1", Owner: "o", Profile: "standard", State: bothy.StateCold}
		if err := s.CreateComputer(f.ctx, other); err != nil {
			t.Fatal(err)
		}
		otherCmd, _, err := f.c.RunCommand(f.ctx, "t1", "cmp2", bothy.RunRequest{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
		w := f.poll()
		if err := f.c.Report(f.ctx, w.Credential, otherCmd.ID, &runtime.Report{State: bothy.RunRunning}); code(err) != bothy.ENOTFOUND {
			t.Errorf("cmp1's credential reporting on cmp2's command: %v", err)
		}
		if _, err := f.c.AppendEvents(f.ctx, w.Credential, otherCmd.ID, []bothy.Event{{Seq: 1, Kind: bothy.EventStdout, Data: []byte("x")}}); code(err) != bothy.ENOTFOUND {
			t.Errorf("cmp1's credential appending to cmp2's command: %v", err)
		}
	})
}

package runtimetest

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/storetest"
)

func testPoll(t *testing.T, open func(t *testing.T) *Env) {
	t.Run("ErrUnauthorized", func(t *testing.T) {
		f := newFixture(t, open)
		for _, tok := range []string{"", "wrong", f.AgentToken + "x"} {
			_, err := f.Control.Poll(f.ctx, tok, &runtime.PollRequest{AgentID: agentID})
			storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		f := newFixture(t, open)
		for _, id := range []string{"", "no spaces"} {
			_, err := f.Control.Poll(f.ctx, f.AgentToken, &runtime.PollRequest{AgentID: id})
			storetest.WantCode(t, err, bothy.EINVALID)
		}
	})
	t.Run("Lease", func(t *testing.T) {
		f := newFixture(t, open)
		if w := f.poll(); w != nil {
			t.Fatalf("a cold computer has work: %+v", w)
		}
		f.run(f.tenant.ID, f.comp.ID, "true")
		w := f.poll()
		if w == nil {
			t.Fatal("no lease for the computer's first command")
		}
		if w.LeaseID == "" || w.TenantID != f.tenant.ID || w.Generation != 1 || w.Provider == "" || w.Revision != 0 || w.Stop {
			t.Errorf("lease work %+v", w)
		}
		if w.Credential == "" || !w.CredentialExpires.After(time.Now()) {
			t.Errorf("credential %q expires %v", w.Credential, w.CredentialExpires)
		}
		if !bytes.Equal(w.HashKey, f.tenant.HashKey) {
			t.Error("the lease does not carry the tenant's checkpoint key")
		}
		if len(w.Commands) != 0 {
			t.Errorf("commands sent before the lease is ready: %+v", w.Commands)
		}
	})
	t.Run("Dispatch", func(t *testing.T) {
		f := newFixture(t, open)
		cmd, w := f.ready()
		if len(w.Commands) != 1 || w.Commands[0].CommandID != cmd.ID || w.Commands[0].Action != runtime.ActRun {
			t.Fatalf("after ready: %+v, want one run of %s", w.Commands, cmd.ID)
		}
		if s := w.Commands[0].Spec; s == nil || !slices.Equal(s.Argv, []string{"true"}) || s.Cwd != "src" {
			t.Fatalf("spec %+v", s)
		}
		f.wantState(cmd.ID, bothy.CommandDispatched)
		if again := f.poll(held(w)); len(again.Commands) != 0 {
			t.Fatalf("a command is sent to run twice: %+v", again.Commands)
		}
		if err := f.Control.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunRunning}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Control.AppendEvents(f.ctx, w.Credential, cmd.ID, []bothy.Event{{Seq: 1, Kind: bothy.EventStdout, Data: []byte("x")}, {Seq: 2, Kind: bothy.EventStdout, Data: []byte("y")}}); err != nil {
			t.Fatal(err)
		}
		w = f.poll(held(w))
		if len(w.Commands) != 1 || w.Commands[0].Action != runtime.ActAttach || w.Commands[0].AfterSeq != 2 {
			t.Fatalf("a running command: %+v, want attach after seq 2", w.Commands)
		}
	})
	t.Run("Cancel", func(t *testing.T) {
		f := newFixture(t, open)
		cmd, w := f.running()
		if _, err := f.Compute.CancelCommand(f.ctx, f.tenant.ID, cmd.ID); err != nil {
			t.Fatal(err)
		}
		w = f.poll(held(w))
		if !slices.ContainsFunc(w.Commands, func(c *runtime.CommandWork) bool { return c.CommandID == cmd.ID && c.Action == runtime.ActCancel }) {
			t.Fatalf("after a cancel: %+v, want a cancel of %s", w.Commands, cmd.ID)
		}
		exit := &bothy.Exit{ExecResult: bothy.ExecResult{ExitCode: 137}, Cancelled: true}
		if err := f.Control.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunFinished, Exit: exit}); err != nil {
			t.Fatal(err)
		}
		f.wantState(cmd.ID, bothy.CommandCancelled)
	})
	t.Run("Stop", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.ready()
		var stopped *bothy.Computer
		done := async(func() (err error) {
			stopped, err = f.Compute.StopComputer(f.ctx, f.tenant.ID, f.comp.ID)
			return err
		})
		// Answered once the stop is recorded: the controller marks the
		// computer stopping after it asks the lease to stop, and a release
		// in between leaves it stopping (a race of the controller's, which
		// a real agent's round trip hides).
		for w = f.poll(held(w)); !w.Stop || f.computer().State != bothy.StateStopping; w = f.poll(held(w)) {
			time.Sleep(10 * time.Millisecond)
		}
		if err := f.Control.Released(f.ctx, w.Credential, &runtime.ReleaseRequest{Disposition: bothy.LeaseReleased}); err != nil {
			t.Fatal(err)
		}
		if err := await(t, "StopComputer", done); err != nil {
			t.Fatal(err)
		} else if stopped.State != bothy.StateCold {
			t.Fatalf("stopped computer is %s", stopped.State)
		}
		if got := f.poll(held(w)); got != nil {
			t.Fatalf("a released lease is still listed: %+v", got)
		}
	})
	t.Run("Version", func(t *testing.T) {
		f := newFixture(t, open)
		v := f.pollAll().Version
		if v <= 0 {
			t.Fatalf("first answer's version %d, want above 0", v)
		}
		start := time.Now()
		resp, err := f.Control.Poll(f.ctx, f.AgentToken, &runtime.PollRequest{AgentID: agentID, Version: v, Wait: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		} else if d := time.Since(start); d < 250*time.Millisecond || resp.Version != v {
			t.Fatalf("a poll of the current version returned after %v with version %d, want after its wait with %d", d, resp.Version, v)
		}
		var woken *runtime.PollResponse
		done := async(func() (err error) {
			woken, err = f.Control.Poll(f.ctx, f.AgentToken, &runtime.PollRequest{AgentID: agentID, Version: v, Wait: 20 * time.Second})
			return err
		})
		time.Sleep(50 * time.Millisecond)
		start = time.Now()
		f.run(f.tenant.ID, f.comp.ID, "true")
		if err := await(t, "a waiting poll", done); err != nil {
			t.Fatal(err)
		} else if woken.Version <= v || time.Since(start) > 5*time.Second {
			t.Fatalf("woken after %v with version %d, want soon with a version above %d", time.Since(start), woken.Version, v)
		}
		if workOf(woken, f.comp.ID) == nil && f.poll() == nil {
			t.Fatal("the new lease is not listed")
		}
	})
}

func testReady(t *testing.T, open func(t *testing.T) *Env) {
	t.Run("OK", func(t *testing.T) {
		f := newFixture(t, open)
		f.ready()
		if c := f.computer(); c.State != bothy.StateActive {
			t.Fatalf("computer is %s after ready, want active", c.State)
		}
	})
	t.Run("ErrUnauthorized", func(t *testing.T) {
		f := newFixture(t, open)
		f.run(f.tenant.ID, f.comp.ID, "true")
		w := f.poll()
		for _, cred := range []string{"", "garbage", w.Credential + "x"} {
			err := f.Control.Ready(f.ctx, cred, &runtime.ReadyRequest{Host: "h"})
			storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
		}
		if c := f.computer(); c.State == bothy.StateActive {
			t.Fatal("a refused ready made the computer active")
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.ready()
		if err := f.Control.Released(f.ctx, w.Credential, &runtime.ReleaseRequest{Disposition: bothy.LeaseLost}); err != nil {
			t.Fatal(err)
		}
		err := f.Control.Ready(f.ctx, w.Credential, &runtime.ReadyRequest{Host: "h"})
		storetest.WantCode(t, err, bothy.ECONFLICT)
	})
}

func testReleased(t *testing.T, open func(t *testing.T) *Env) {
	t.Run("OK", func(t *testing.T) {
		f := newFixture(t, open)
		cmd, w := f.running()
		req := &runtime.ReleaseRequest{Disposition: bothy.LeaseLost, Error: "host gone"}
		if err := f.Control.Released(f.ctx, w.Credential, req); err != nil {
			t.Fatal(err)
		}
		f.wantState(cmd.ID, bothy.CommandLost)
		if c := f.computer(); c.State != bothy.StateCold {
			t.Errorf("computer is %s after its lease was released, want cold", c.State)
		}
		if l, err := f.Store.FindLease(f.ctx, f.tenant.ID, w.LeaseID); err != nil || l.ReleasedAt.IsZero() || l.Disposition != bothy.LeaseLost {
			t.Errorf("stored lease %+v, %v", l, err)
		}
		if got := f.poll(held(w)); got != nil {
			t.Errorf("a released lease is still listed: %+v", got)
		}
		// A second report (its first answer was lost) is no error.
		if err := f.Control.Released(f.ctx, w.Credential, req); err != nil {
			t.Fatalf("released again: %v", err)
		}
	})
	t.Run("NextLease", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.running()
		next := f.run(f.tenant.ID, f.comp.ID, "true")
		if err := f.Control.Released(f.ctx, w.Credential, &runtime.ReleaseRequest{Disposition: bothy.LeaseLost}); err != nil {
			t.Fatal(err)
		}
		f.wantState(next.ID, bothy.CommandAdmitted)
		if w2 := f.poll(); w2 == nil || w2.Generation != 2 || w2.LeaseID == w.LeaseID {
			t.Fatalf("an admitted command after a release: %+v, want a lease of generation 2", w2)
		}
	})
	t.Run("Failed", func(t *testing.T) {
		f := newFixture(t, open)
		cmd := f.run(f.tenant.ID, f.comp.ID, "true")
		w := f.poll()
		if err := f.Control.Released(f.ctx, w.Credential, &runtime.ReleaseRequest{Disposition: bothy.LeaseFailed, Error: "no sandbox"}); err != nil {
			t.Fatal(err)
		}
		f.wantState(cmd.ID, bothy.CommandFailed)
		if got := f.poll(); got != nil {
			t.Fatalf("a lease that failed to start is followed by another: %+v", got)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.ready()
		err := f.Control.Released(f.ctx, w.Credential, &runtime.ReleaseRequest{Disposition: "vanished"})
		storetest.WantCode(t, err, bothy.EINVALID)
		if got := f.poll(held(w)); got == nil {
			t.Fatal("a refused release released the lease")
		}
	})
	t.Run("ErrUnauthorized", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.ready()
		err := f.Control.Released(f.ctx, w.Credential+"x", &runtime.ReleaseRequest{Disposition: bothy.LeaseReleased})
		storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
	})
}

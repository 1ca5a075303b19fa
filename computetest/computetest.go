// Package computetest is the conformance suite for bothy.ComputeService,
// and Fake, a ComputeService over a real store with no runtime for the
// tests of code that calls one (the HTTP server, the CLI). Every
// implementation, Fake included, calls TestComputeService from its tests.
// Only tests import this package.
package computetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/storetest"
)

// Env is a compute service under test and the means to give it computers.
type Env struct {
	// Compute is the service under test, acting for TenantID.
	Compute  bothy.ComputeService
	TenantID string
	// Other acts for another tenant, OtherTenantID, that owns none of
	// TenantID's computers: Compute itself for a service scoped by its
	// tenantID argument, a client of the other tenant for one scoped by
	// its credential.
	Other         bothy.ComputeService
	OtherTenantID string
	// NewComputer returns the id of a new cold computer of TenantID.
	NewComputer func(t *testing.T) string
	// Runtime plays the runtime of the computers.
	Runtime Runtime
}

// Runtime plays the runtime of an Env's computers: it runs the commands
// the service starts, and the suite streams their output and ends them
// through it. Both methods wait until the command runs.
type Runtime interface {
	// Emit appends output events to a running command.
	Emit(t *testing.T, tenantID, commandID string, evs ...bothy.Event)
	// Finish ends a running command in a terminal state (completed with
	// exit code exit, failed, timed_out, cancelled or lost).
	Finish(t *testing.T, tenantID, commandID, state string, exit int)
}

// TestComputeService runs the conformance suite. open is called once and
// must return an Env over stores that live until the test ends; each
// subtest takes new computers.
func TestComputeService(t *testing.T, open func(t *testing.T) *Env) {
	e := open(t)
	t.Run("RunCommand", func(t *testing.T) { testRunCommand(t, e) })
	t.Run("WaitCommand", func(t *testing.T) { testWaitCommand(t, e) })
	t.Run("WaitEvents", func(t *testing.T) { testWaitEvents(t, e) })
	t.Run("CancelCommand", func(t *testing.T) { testCancelCommand(t, e) })
	t.Run("StopComputer", func(t *testing.T) { testStopComputer(t, e) })
	t.Run("DestroyComputer", func(t *testing.T) { testDestroyComputer(t, e) })
	t.Run("Checkpoint", func(t *testing.T) { testCheckpoint(t, e) })
}

// fixture is one computer of an Env.
type fixture struct {
	*Env
	t   *testing.T
	ctx context.Context
	id  string
}

func newFixture(t *testing.T, e *Env) *fixture {
	t.Helper()
	return &fixture{Env: e, t: t, ctx: t.Context(), id: e.NewComputer(t)}
}

// run admits a command of argv on the fixture's computer.
func (f *fixture) run(argv ...string) *bothy.Command {
	f.t.Helper()
	cmd, created, err := f.Compute.RunCommand(f.ctx, f.TenantID, f.id, bothy.RunRequest{Argv: argv})
	if err != nil || !created {
		f.t.Fatalf("RunCommand(%q): created %v, %v", argv, created, err)
	}
	return cmd
}

// finished runs a command and ends it completed with exit code exit.
func (f *fixture) finished(exit int) *bothy.Command {
	f.t.Helper()
	cmd := f.run("true")
	f.Runtime.Finish(f.t, f.TenantID, cmd.ID, bothy.CommandCompleted, exit)
	return f.wait(cmd.ID)
}

// wait waits up to 10 seconds for the command to end.
func (f *fixture) wait(id string) *bothy.Command {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	cmd, err := f.Compute.WaitCommand(ctx, f.TenantID, id)
	if err != nil {
		f.t.Fatalf("WaitCommand(%s): %v", id, err)
	}
	return cmd
}

// returned runs fn in a goroutine and reports on the channel when it
// returned.
func returned(fn func()) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		fn()
	}()
	return ch
}

// blocked fails the test unless ch stays open for a while.
func blocked(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s returned before what it waits for", what)
	case <-time.After(150 * time.Millisecond):
	}
}

// soon fails the test unless ch closes within 10 seconds.
func soon(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10s", what)
	}
}

// wantCtxErr fails the test unless err is ctx's error.
func wantCtxErr(t *testing.T, ctx context.Context, err error) {
	t.Helper()
	if err == nil || !errors.Is(err, ctx.Err()) {
		t.Fatalf("error %v, want the context's, %v", err, ctx.Err())
	}
}

func testRunCommand(t *testing.T, e *Env) {
	t.Run("OK", func(t *testing.T) {
		f := newFixture(t, e)
		cmd := f.run("echo", "hi")
		if cmd.ID == "" || cmd.ComputerID != f.id || len(cmd.Argv) != 2 || cmd.Argv[1] != "hi" || bothy.CommandTerminal(cmd.State) {
			t.Fatalf("command %+v", cmd)
		}
		f.Runtime.Finish(t, f.TenantID, cmd.ID, bothy.CommandCompleted, 0)
		if got := f.wait(cmd.ID); got.State != bothy.CommandCompleted || got.ID != cmd.ID {
			t.Fatalf("after it ran: %+v", got)
		}
	})
	t.Run("Idempotent", func(t *testing.T) {
		f := newFixture(t, e)
		req := bothy.RunRequest{Argv: []string{"true"}, IdempotencyKey: "key-1"}
		first, created, err := f.Compute.RunCommand(f.ctx, f.TenantID, f.id, req)
		if err != nil || !created {
			t.Fatalf("first: created %v, %v", created, err)
		}
		again, created, err := f.Compute.RunCommand(f.ctx, f.TenantID, f.id, req)
		if err != nil || created || again.ID != first.ID {
			t.Fatalf("same key: %+v, created %v, %v; want %s, not created", again, created, err, first.ID)
		}
		req.IdempotencyKey = "key-2"
		if other, created, err := f.Compute.RunCommand(f.ctx, f.TenantID, f.id, req); err != nil || !created || other.ID == first.ID {
			t.Fatalf("another key: %+v, created %v, %v", other, created, err)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		f := newFixture(t, e)
		for _, req := range []bothy.RunRequest{{}, {Argv: []string{"true"}, Script: "true"}, {Argv: []string{"true"}, TimeoutMS: -1}} {
			_, _, err := f.Compute.RunCommand(f.ctx, f.TenantID, f.id, req)
			storetest.WantCode(t, err, bothy.EINVALID)
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		f := newFixture(t, e)
		if _, err := f.Compute.DestroyComputer(f.ctx, f.TenantID, f.id); err != nil {
			t.Fatal(err)
		}
		_, _, err := f.Compute.RunCommand(f.ctx, f.TenantID, f.id, bothy.RunRequest{Argv: []string{"true"}})
		storetest.WantCode(t, err, bothy.ECONFLICT)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := newFixture(t, e)
		_, _, err := f.Compute.RunCommand(f.ctx, f.TenantID, "cmp_missing", bothy.RunRequest{Argv: []string{"true"}})
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, _, err = f.Other.RunCommand(f.ctx, f.OtherTenantID, f.id, bothy.RunRequest{Argv: []string{"true"}})
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
}

func testWaitCommand(t *testing.T, e *Env) {
	t.Run("OK", func(t *testing.T) {
		f := newFixture(t, e)
		cmd := f.run("true")
		var got *bothy.Command
		var err error
		done := returned(func() { got, err = f.Compute.WaitCommand(f.ctx, f.TenantID, cmd.ID) })
		blocked(t, "WaitCommand", done)
		f.Runtime.Finish(t, f.TenantID, cmd.ID, bothy.CommandCompleted, 3)
		soon(t, "WaitCommand", done)
		if err != nil || got.State != bothy.CommandCompleted || got.ExitCode == nil || *got.ExitCode != 3 {
			t.Fatalf("WaitCommand = %+v, %v; want completed with exit code 3", got, err)
		}
		// A command that has ended is returned at once.
		if again := f.wait(cmd.ID); again.State != bothy.CommandCompleted {
			t.Fatalf("again: %+v", again)
		}
	})
	t.Run("States", func(t *testing.T) {
		f := newFixture(t, e)
		for _, state := range []string{bothy.CommandFailed, bothy.CommandTimedOut, bothy.CommandLost} {
			cmd := f.run("true")
			f.Runtime.Finish(t, f.TenantID, cmd.ID, state, 0)
			if got := f.wait(cmd.ID); got.State != state {
				t.Errorf("ended %s: WaitCommand = %s", state, got.State)
			}
		}
	})
	t.Run("Context", func(t *testing.T) {
		f := newFixture(t, e)
		cmd := f.run("true")
		ctx, cancel := context.WithTimeout(f.ctx, 200*time.Millisecond)
		defer cancel()
		_, err := f.Compute.WaitCommand(ctx, f.TenantID, cmd.ID)
		wantCtxErr(t, ctx, err)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := newFixture(t, e)
		cmd := f.run("true")
		_, err := f.Compute.WaitCommand(f.ctx, f.TenantID, "cmd_missing")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = f.Other.WaitCommand(f.ctx, f.OtherTenantID, cmd.ID)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
}

func testWaitEvents(t *testing.T, e *Env) {
	out := func(s string) bothy.Event { return bothy.Event{Kind: bothy.EventStdout, Data: []byte(s)} }
	t.Run("OK", func(t *testing.T) {
		f := newFixture(t, e)
		cmd := f.run("true")
		var err error
		done := returned(func() { err = f.Compute.WaitEvents(f.ctx, f.TenantID, cmd.ID, 0) })
		blocked(t, "WaitEvents", done)
		f.Runtime.Emit(t, f.TenantID, cmd.ID, out("one"))
		soon(t, "WaitEvents", done)
		if err != nil {
			t.Fatal(err)
		}
		done = returned(func() { err = f.Compute.WaitEvents(f.ctx, f.TenantID, cmd.ID, 1) })
		blocked(t, "WaitEvents after the newest event", done)
		f.Runtime.Emit(t, f.TenantID, cmd.ID, out("two"))
		soon(t, "WaitEvents", done)
		if err != nil {
			t.Fatal(err)
		}
		// A command that has ended has nothing more to wait for.
		f.Runtime.Finish(t, f.TenantID, cmd.ID, bothy.CommandCompleted, 0)
		f.wait(cmd.ID)
		done = returned(func() { err = f.Compute.WaitEvents(f.ctx, f.TenantID, cmd.ID, 1000) })
		soon(t, "WaitEvents of an ended command", done)
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Context", func(t *testing.T) {
		f := newFixture(t, e)
		cmd := f.run("true")
		ctx, cancel := context.WithTimeout(f.ctx, 200*time.Millisecond)
		defer cancel()
		wantCtxErr(t, ctx, f.Compute.WaitEvents(ctx, f.TenantID, cmd.ID, 0))
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := newFixture(t, e)
		cmd := f.run("true")
		storetest.WantCode(t, f.Compute.WaitEvents(f.ctx, f.TenantID, "cmd_missing", 0), bothy.ENOTFOUND)
		storetest.WantCode(t, f.Other.WaitEvents(f.ctx, f.OtherTenantID, cmd.ID, 0), bothy.ENOTFOUND)
	})
}

func testCancelCommand(t *testing.T, e *Env) {
	t.Run("Running", func(t *testing.T) {
		f := newFixture(t, e)
		cmd := f.run("sleep", "100")
		f.Runtime.Emit(t, f.TenantID, cmd.ID, bothy.Event{Kind: bothy.EventStdout, Data: []byte("started")})
		got, err := f.Compute.CancelCommand(f.ctx, f.TenantID, cmd.ID)
		if err != nil || got.ID != cmd.ID {
			t.Fatalf("CancelCommand = %+v, %v", got, err)
		}
		if got := f.wait(cmd.ID); got.State != bothy.CommandCancelled {
			t.Fatalf("a cancelled command ended %s", got.State)
		}
	})
	t.Run("Ended", func(t *testing.T) {
		f := newFixture(t, e)
		cmd := f.finished(4)
		got, err := f.Compute.CancelCommand(f.ctx, f.TenantID, cmd.ID)
		if err != nil || got.State != bothy.CommandCompleted || got.ExitCode == nil || *got.ExitCode != 4 {
			t.Fatalf("cancel of an ended command = %+v, %v; want it as it was", got, err)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := newFixture(t, e)
		cmd := f.run("true")
		_, err := f.Compute.CancelCommand(f.ctx, f.TenantID, "cmd_missing")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = f.Other.CancelCommand(f.ctx, f.OtherTenantID, cmd.ID)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		f.Runtime.Finish(t, f.TenantID, cmd.ID, bothy.CommandCompleted, 0)
		if got := f.wait(cmd.ID); got.State != bothy.CommandCompleted {
			t.Fatalf("another tenant's cancel: the command ended %s", got.State)
		}
	})
}

func testStopComputer(t *testing.T, e *Env) {
	t.Run("Cold", func(t *testing.T) {
		f := newFixture(t, e)
		c, err := f.Compute.StopComputer(f.ctx, f.TenantID, f.id)
		if err != nil || c.ID != f.id || c.State != bothy.StateCold {
			t.Fatalf("StopComputer of a cold computer = %+v, %v", c, err)
		}
	})
	t.Run("Active", func(t *testing.T) {
		f := newFixture(t, e)
		f.finished(0)
		c, err := f.Compute.StopComputer(f.ctx, f.TenantID, f.id)
		if err != nil || c.ID != f.id || c.State != bothy.StateCold {
			t.Fatalf("StopComputer = %+v, %v; want it cold", c, err)
		}
		// It starts again for the next command.
		if cmd := f.finished(0); cmd.State != bothy.CommandCompleted {
			t.Fatalf("after a stop: %+v", cmd)
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		f := newFixture(t, e)
		if _, err := f.Compute.DestroyComputer(f.ctx, f.TenantID, f.id); err != nil {
			t.Fatal(err)
		}
		_, err := f.Compute.StopComputer(f.ctx, f.TenantID, f.id)
		storetest.WantCode(t, err, bothy.ECONFLICT)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := newFixture(t, e)
		_, err := f.Compute.StopComputer(f.ctx, f.TenantID, "cmp_missing")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = f.Other.StopComputer(f.ctx, f.OtherTenantID, f.id)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
}

func testDestroyComputer(t *testing.T, e *Env) {
	t.Run("OK", func(t *testing.T) {
		f := newFixture(t, e)
		f.finished(0)
		c, err := f.Compute.DestroyComputer(f.ctx, f.TenantID, f.id)
		if err != nil || c.ID != f.id || c.State != bothy.StateDestroyed {
			t.Fatalf("DestroyComputer = %+v, %v", c, err)
		}
		// Destroyed is final; destroying again returns it as it is.
		if c, err := f.Compute.DestroyComputer(f.ctx, f.TenantID, f.id); err != nil || c.State != bothy.StateDestroyed {
			t.Fatalf("again: %+v, %v", c, err)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := newFixture(t, e)
		_, err := f.Compute.DestroyComputer(f.ctx, f.TenantID, "cmp_missing")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = f.Other.DestroyComputer(f.ctx, f.OtherTenantID, f.id)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		if c, err := f.Compute.StopComputer(f.ctx, f.TenantID, f.id); err != nil || c.State != bothy.StateCold {
			t.Fatalf("another tenant's destroy: %+v, %v", c, err)
		}
	})
}

func testCheckpoint(t *testing.T, e *Env) {
	t.Run("Cold", func(t *testing.T) {
		f := newFixture(t, e)
		rev, err := f.Compute.Checkpoint(f.ctx, f.TenantID, f.id)
		if err != nil || rev.ComputerID != f.id || rev.Number != 0 {
			t.Fatalf("Checkpoint of a new cold computer = %+v, %v; want revision 0", rev, err)
		}
	})
	t.Run("Active", func(t *testing.T) {
		f := newFixture(t, e)
		f.finished(0)
		rev, err := f.Compute.Checkpoint(f.ctx, f.TenantID, f.id)
		if err != nil || rev.ComputerID != f.id || rev.Number != 0 {
			t.Fatalf("Checkpoint of a computer whose workspace never changed = %+v, %v; want revision 0", rev, err)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := newFixture(t, e)
		_, err := f.Compute.Checkpoint(f.ctx, f.TenantID, "cmp_missing")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = f.Other.Checkpoint(f.ctx, f.OtherTenantID, f.id)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
}

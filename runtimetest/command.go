package runtimetest

import (
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/storetest"
)

// runningN admits n commands on cmp1, starts its lease and brings them all
// to running.
func (f *fixture) runningN(n int) ([]*bothy.Command, *runtime.LeaseWork) {
	f.t.Helper()
	var cmds []*bothy.Command
	for range n {
		cmds = append(cmds, f.run(f.tenant.ID, f.comp.ID, "true"))
	}
	w := f.poll()
	if err := f.Control.Ready(f.ctx, w.Credential, &runtime.ReadyRequest{Host: "h"}); err != nil {
		f.t.Fatal(err)
	}
	if w = f.poll(held(w)); len(w.Commands) != n {
		f.t.Fatalf("%d commands sent to run, want %d", len(w.Commands), n)
	}
	for _, cmd := range cmds {
		if err := f.Control.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunRunning}); err != nil {
			f.t.Fatal(err)
		}
	}
	return cmds, w
}

// elsewhere returns a running command of another computer of tenant t1
// and one of another tenant's computer.
func (f *fixture) elsewhere() (sameTenant, otherTenant *bothy.Command) {
	f.t.Helper()
	f.newComputer(f.tenant.ID, "cmp2")
	f.newTenant("t2")
	f.newComputer("t2", "cmp3")
	return f.run(f.tenant.ID, "cmp2", "true"), f.run("t2", "cmp3", "true")
}

func testReport(t *testing.T, open func(t *testing.T) *Env) {
	t.Run("Running", func(t *testing.T) {
		f := newFixture(t, open)
		cmd, w := f.running()
		if err := f.Control.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunRunning}); err != nil {
			t.Fatalf("running again: %v", err)
		}
		f.wantState(cmd.ID, bothy.CommandRunning)
	})
	t.Run("Finished", func(t *testing.T) {
		f := newFixture(t, open)
		cmds, w := f.runningN(6)
		for i, c := range []struct {
			report *runtime.Report
			state  string
		}{
			{&runtime.Report{State: bothy.RunFinished, Exit: &bothy.Exit{ExecResult: bothy.ExecResult{ExitCode: 3}}}, bothy.CommandCompleted},
			{&runtime.Report{State: bothy.RunFinished, Exit: &bothy.Exit{ExecResult: bothy.ExecResult{ExitCode: 137, TimedOut: true}}}, bothy.CommandTimedOut},
			{&runtime.Report{State: bothy.RunFinished, Exit: &bothy.Exit{ExecResult: bothy.ExecResult{ExitCode: 137}, Cancelled: true}}, bothy.CommandCancelled},
			{&runtime.Report{State: bothy.RunFailed, Error: "no such program"}, bothy.CommandFailed},
			{&runtime.Report{State: bothy.RunLost, Error: "supervisor died"}, bothy.CommandLost},
			{&runtime.Report{State: bothy.RunFinished, Exit: &bothy.Exit{ExecResult: bothy.ExecResult{ExitCode: 137, Signal: "SIGKILL"}, DiskFull: true}}, bothy.CommandFailed},
		} {
			if err := f.Control.Report(f.ctx, w.Credential, cmds[i].ID, c.report); err != nil {
				t.Fatalf("report %s: %v", c.state, err)
			}
			f.wantState(cmds[i].ID, c.state)
		}
		if got := f.command(cmds[0].ID); got.ExitCode == nil || *got.ExitCode != 3 {
			t.Errorf("exit code %v, want 3", got.ExitCode)
		}
		if got := f.command(cmds[5].ID); !got.DiskFull || got.ExitCode == nil || *got.ExitCode != 137 {
			t.Errorf("a disk_full end: disk_full %v exit code %v, want true and 137", got.DiskFull, got.ExitCode)
		}
		// A report about a command that ended changes nothing.
		again := &runtime.Report{State: bothy.RunFinished, Exit: &bothy.Exit{ExecResult: bothy.ExecResult{ExitCode: 9}}}
		if err := f.Control.Report(f.ctx, w.Credential, cmds[0].ID, again); err != nil {
			t.Fatalf("a second end: %v", err)
		}
		if got := f.wantState(cmds[0].ID, bothy.CommandCompleted); *got.ExitCode != 3 {
			t.Errorf("a second end changed the exit code to %d", *got.ExitCode)
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		f := newFixture(t, open)
		cmd, w := f.running()
		// Finished only once every event up to LastSeq is stored.
		err := f.Control.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunFinished, Exit: &bothy.Exit{}, LastSeq: 2})
		storetest.WantCode(t, err, bothy.ECONFLICT)
		f.wantState(cmd.ID, bothy.CommandRunning)
		if _, err := f.Control.AppendEvents(f.ctx, w.Credential, cmd.ID, []bothy.Event{{Seq: 1, Kind: bothy.EventStdout, Data: []byte("a")}, {Seq: 2, Kind: bothy.EventStdout, Data: []byte("b")}}); err != nil {
			t.Fatal(err)
		}
		if err := f.Control.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunFinished, Exit: &bothy.Exit{}, LastSeq: 2}); err != nil {
			t.Fatal(err)
		}
		f.wantState(cmd.ID, bothy.CommandCompleted)
	})
	t.Run("NeverSeen", func(t *testing.T) {
		f := newFixture(t, open)
		cmds, w := f.runningN(1)
		err := f.Control.Report(f.ctx, w.Credential, cmds[0].ID, &runtime.Report{State: bothy.RunNeverSeen})
		storetest.WantCode(t, err, bothy.ECONFLICT)
		f.wantState(cmds[0].ID, bothy.CommandRunning)
		// A command sent to run that the runtime never saw is admitted
		// again, for a later lease.
		cmd, w2 := f.ready()
		if w2.LeaseID != w.LeaseID {
			t.Fatal("a new lease")
		}
		if err := f.Control.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunNeverSeen}); err != nil {
			t.Fatal(err)
		}
		f.wantState(cmd.ID, bothy.CommandAdmitted)
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		f := newFixture(t, open)
		cmd, w := f.running()
		err := f.Control.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: "exploded"})
		storetest.WantCode(t, err, bothy.EINVALID)
		f.wantState(cmd.ID, bothy.CommandRunning)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.running()
		same, other := f.elsewhere()
		for _, id := range []string{"cmd_missing", same.ID, other.ID} {
			err := f.Control.Report(f.ctx, w.Credential, id, &runtime.Report{State: bothy.RunRunning})
			storetest.WantCode(t, err, bothy.ENOTFOUND)
		}
		if got := f.command(same.ID); got.State != bothy.CommandAdmitted {
			t.Fatalf("another computer's command is %s", got.State)
		}
	})
	t.Run("ErrUnauthorized", func(t *testing.T) {
		f := newFixture(t, open)
		cmd, w := f.running()
		err := f.Control.Report(f.ctx, w.Credential+"x", cmd.ID, &runtime.Report{State: bothy.RunLost})
		storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
		f.wantState(cmd.ID, bothy.CommandRunning)
	})
}

func testAppendEvents(t *testing.T, open func(t *testing.T) *Env) {
	events := []bothy.Event{{Seq: 1, Kind: bothy.EventStdout, Data: []byte("out")}, {Seq: 2, Kind: bothy.EventStderr, Data: []byte("err")}}
	t.Run("OK", func(t *testing.T) {
		f := newFixture(t, open)
		cmd, w := f.running()
		resp, err := f.Control.AppendEvents(f.ctx, w.Credential, cmd.ID, events)
		if err != nil || resp.LastSeq != 2 {
			t.Fatalf("AppendEvents = %+v, %v; want last seq 2", resp, err)
		}
		got, err := f.Store.ListEvents(f.ctx, f.tenant.ID, cmd.ID, 0, 0)
		if err != nil || len(got) != 2 || string(got[0].Data) != "out" || got[1].Seq != 2 || got[1].Kind != bothy.EventStderr {
			t.Fatalf("stored events %+v, %v", got, err)
		}
		// Re-sent after a reconnect: a no-op that acknowledges the newest.
		if resp, err := f.Control.AppendEvents(f.ctx, w.Credential, cmd.ID, events[1:]); err != nil || resp.LastSeq != 2 {
			t.Fatalf("re-sent: %+v, %v", resp, err)
		}
		if resp, err := f.Control.AppendEvents(f.ctx, w.Credential, cmd.ID, nil); err != nil || resp.LastSeq != 2 {
			t.Fatalf("an empty batch: %+v, %v", resp, err)
		}
		if got, _ := f.Store.ListEvents(f.ctx, f.tenant.ID, cmd.ID, 0, 0); len(got) != 2 {
			t.Fatalf("%d events stored after re-sending, want 2", len(got))
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		f := newFixture(t, open)
		cmd, w := f.running()
		if _, err := f.Control.AppendEvents(f.ctx, w.Credential, cmd.ID, events); err != nil {
			t.Fatal(err)
		}
		_, err := f.Control.AppendEvents(f.ctx, w.Credential, cmd.ID, []bothy.Event{{Seq: 2, Kind: bothy.EventStdout, Data: []byte("other")}})
		storetest.WantCode(t, err, bothy.ECONFLICT)
		// A command that ended takes no new events.
		if err := f.Control.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunFinished, Exit: &bothy.Exit{}, LastSeq: 2}); err != nil {
			t.Fatal(err)
		}
		_, err = f.Control.AppendEvents(f.ctx, w.Credential, cmd.ID, []bothy.Event{{Seq: 3, Kind: bothy.EventStdout, Data: []byte("late")}})
		storetest.WantCode(t, err, bothy.ECONFLICT)
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		f := newFixture(t, open)
		cmd, w := f.running()
		_, err := f.Control.AppendEvents(f.ctx, w.Credential, cmd.ID, []bothy.Event{{Seq: 5, Kind: bothy.EventStdout, Data: []byte("gap")}})
		storetest.WantCode(t, err, bothy.EINVALID)
		if got := f.command(cmd.ID); got.LastSeq != 0 {
			t.Fatalf("last seq %d after a refused batch", got.LastSeq)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.running()
		same, other := f.elsewhere()
		for _, id := range []string{"cmd_missing", same.ID, other.ID} {
			_, err := f.Control.AppendEvents(f.ctx, w.Credential, id, events)
			storetest.WantCode(t, err, bothy.ENOTFOUND)
		}
	})
	t.Run("ErrUnauthorized", func(t *testing.T) {
		f := newFixture(t, open)
		cmd, w := f.running()
		_, err := f.Control.AppendEvents(f.ctx, w.Credential+"x", cmd.ID, events)
		storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
	})
}

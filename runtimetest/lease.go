package runtimetest

import (
	"slices"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/storetest"
)

func testCommit(t *testing.T, open func(t *testing.T) *Env) {
	t.Run("OK", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.ready()
		rev, err := f.Control.Commit(f.ctx, w.Credential, &runtime.CommitRequest{Base: 0, RootDigest: root(1), Packs: []string{"p1"}, Size: 10, FileCount: 2})
		if err != nil {
			t.Fatal(err)
		}
		if rev.Number != 1 || rev.ComputerID != f.comp.ID || rev.RootDigest != root(1) || rev.Size != 10 || rev.FileCount != 2 {
			t.Fatalf("revision %+v", rev)
		}
		// The revision's packs are the store's (Revision.Packs is not
		// part of an answer): the next poll carries them.
		if c := f.computer(); c.Revision != 1 {
			t.Errorf("computer at revision %d", c.Revision)
		}
		if w = f.poll(held(w)); w.Revision != 1 || w.RootDigest != root(1) || !slices.Equal(w.Packs, []string{"p1"}) || w.Size != 10 || w.FileCount != 2 {
			t.Errorf("the next answer's revision: %+v", w)
		}
		if rev, err = f.Control.Commit(f.ctx, w.Credential, &runtime.CommitRequest{Base: 1, RootDigest: root(2)}); err != nil || rev.Number != 2 {
			t.Fatalf("commit on top of 1: %+v, %v", rev, err)
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.ready()
		if _, err := f.Control.Commit(f.ctx, w.Credential, &runtime.CommitRequest{Base: 0, RootDigest: root(1)}); err != nil {
			t.Fatal(err)
		}
		for _, base := range []int64{0, 5} {
			_, err := f.Control.Commit(f.ctx, w.Credential, &runtime.CommitRequest{Base: base, RootDigest: root(2)})
			storetest.WantCode(t, err, bothy.ECONFLICT)
		}
		if c := f.computer(); c.Revision != 1 {
			t.Errorf("computer at revision %d after refused commits", c.Revision)
		}
	})
	t.Run("ErrUnauthorized", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.ready()
		_, err := f.Control.Commit(f.ctx, w.Credential+"x", &runtime.CommitRequest{Base: 0, RootDigest: root(1)})
		storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
	})
}

// checkpointWanted polls until the answer asks for a checkpoint, and
// returns it.
func (f *fixture) checkpointWanted(w *runtime.LeaseWork) *runtime.LeaseWork {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for w = f.poll(held(w)); w.Checkpoint == 0; w = f.poll(held(w)) {
		if time.Now().After(deadline) {
			f.t.Fatal("no checkpoint asked for within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return w
}

func testCheckpointed(t *testing.T, open func(t *testing.T) *Env) {
	t.Run("OK", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.ready()
		var rev *bothy.Revision
		done := async(func() (err error) {
			rev, err = f.Compute.Checkpoint(f.ctx, f.tenant.ID, f.comp.ID)
			return err
		})
		w = f.checkpointWanted(w)
		if _, err := f.Control.Commit(f.ctx, w.Credential, &runtime.CommitRequest{Base: 0, RootDigest: root(1)}); err != nil {
			t.Fatal(err)
		}
		if err := f.Control.Checkpointed(f.ctx, w.Credential, &runtime.CheckpointedRequest{Checkpoint: w.Checkpoint, Revision: 1}); err != nil {
			t.Fatal(err)
		}
		if err := await(t, "Checkpoint", done); err != nil {
			t.Fatal(err)
		} else if rev.Number != 1 || rev.RootDigest != root(1) {
			t.Fatalf("Checkpoint returned %+v, want revision 1", rev)
		}
		// Answered: the next answer asks for no new checkpoint.
		if again := f.poll(held(w)); again.Checkpoint != w.Checkpoint {
			t.Fatalf("checkpoint %d asked for after %d was answered", again.Checkpoint, w.Checkpoint)
		}
	})
	t.Run("Error", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.ready()
		done := async(func() error {
			_, err := f.Compute.Checkpoint(f.ctx, f.tenant.ID, f.comp.ID)
			return err
		})
		w = f.checkpointWanted(w)
		if err := f.Control.Checkpointed(f.ctx, w.Credential, &runtime.CheckpointedRequest{Checkpoint: w.Checkpoint, Error: "disk full"}); err != nil {
			t.Fatal(err)
		}
		if err := await(t, "Checkpoint", done); err == nil {
			t.Fatal("a failed checkpoint returned no error")
		}
	})
	t.Run("ErrUnauthorized", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.ready()
		err := f.Control.Checkpointed(f.ctx, w.Credential+"x", &runtime.CheckpointedRequest{Checkpoint: 1})
		storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
	})
}

func testApplied(t *testing.T, open func(t *testing.T) *Env) {
	// The full apply path (a files-API change to an active computer) is
	// filetest's, with Agent; here, what the control plane answers alone.
	t.Run("Unknown", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.ready()
		if err := f.Control.Applied(f.ctx, w.Credential, &runtime.AppliedRequest{ID: 99, Revision: 1}); err != nil {
			t.Fatalf("an answer nobody waits for: %v", err)
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.ready()
		if err := f.Control.Released(f.ctx, w.Credential, &runtime.ReleaseRequest{Disposition: bothy.LeaseReleased}); err != nil {
			t.Fatal(err)
		}
		err := f.Control.Applied(f.ctx, w.Credential, &runtime.AppliedRequest{ID: 1})
		storetest.WantCode(t, err, bothy.ECONFLICT)
	})
	t.Run("ErrUnauthorized", func(t *testing.T) {
		f := newFixture(t, open)
		_, w := f.ready()
		err := f.Control.Applied(f.ctx, w.Credential+"x", &runtime.AppliedRequest{ID: 1})
		storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
	})
}

// testStaleGeneration: once the computer moved to generation g+1, a
// runtime of generation g can neither commit, append events nor report,
// on its own commands or on the new generation's; the new one can.
func testStaleGeneration(t *testing.T, open func(t *testing.T) *Env) {
	f := newFixture(t, open)
	cmd1, w1 := f.running()
	cred1 := w1.Credential
	if err := f.Control.Released(f.ctx, cred1, &runtime.ReleaseRequest{Disposition: bothy.LeaseLost}); err != nil {
		t.Fatal(err)
	}
	cmd2, w2 := f.ready()
	if w2.Generation != 2 || len(w2.Commands) != 1 || w2.Commands[0].CommandID != cmd2.ID {
		t.Fatalf("generation 2: %+v", w2)
	}
	_, err := f.Control.Commit(f.ctx, cred1, &runtime.CommitRequest{Base: 0, RootDigest: root(1)})
	storetest.WantCode(t, err, bothy.ECONFLICT)
	for _, id := range []string{cmd1.ID, cmd2.ID} {
		_, err = f.Control.AppendEvents(f.ctx, cred1, id, []bothy.Event{{Seq: 1, Kind: bothy.EventStdout, Data: []byte("x")}})
		storetest.WantCode(t, err, bothy.ECONFLICT)
		err = f.Control.Report(f.ctx, cred1, id, &runtime.Report{State: bothy.RunFinished, Exit: &bothy.Exit{}})
		storetest.WantCode(t, err, bothy.ECONFLICT)
	}
	if got := f.wantState(cmd2.ID, bothy.CommandDispatched); got.LastSeq != 0 {
		t.Fatalf("the stale runtime appended to the new command: last seq %d", got.LastSeq)
	}
	if c := f.computer(); c.Revision != 0 {
		t.Fatalf("the stale runtime committed revision %d", c.Revision)
	}
	cred2 := w2.Credential
	if err := f.Control.Report(f.ctx, cred2, cmd2.ID, &runtime.Report{State: bothy.RunRunning}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Control.Commit(f.ctx, cred2, &runtime.CommitRequest{Base: 0, RootDigest: root(1)}); err != nil {
		t.Fatalf("the current generation's commit: %v", err)
	}
	if err := f.Control.Report(f.ctx, cred2, cmd2.ID, &runtime.Report{State: bothy.RunFinished, Exit: &bothy.Exit{}}); err != nil {
		t.Fatal(err)
	}
	f.wantState(cmd2.ID, bothy.CommandCompleted)
}

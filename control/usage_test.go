package control_test

import (
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/receipt"
	"github.com/bothyhq/bothy/runtime"
)

// TestReleased_Usage: a lease's release charges the computer what its
// sandbox consumed beyond its commands' usage, once, however often the
// release is reported.
func TestReleased_Usage(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		cmd, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		w := f.ready()
		cred := w.Credential
		if err := f.c.Report(f.ctx, cred, cmd.ID, &runtime.Report{State: bothy.RunRunning}); err != nil {
			t.Fatal(err)
		}
		exit := &bothy.Exit{ExecResult: bothy.ExecResult{Usage: bothy.Usage{CPUMicros: 1000, PeakMemoryBytes: 10}}}
		if err := f.c.Report(f.ctx, cred, cmd.ID, &runtime.Report{State: bothy.RunFinished, Exit: exit}); err != nil {
			t.Fatal(err)
		}
		total := &bothy.Usage{CPUMicros: 5000, PeakMemoryBytes: 99}
		for range 2 {
			if err := f.c.Released(f.ctx, cred, &runtime.ReleaseRequest{Disposition: bothy.LeaseReleased, Usage: total}); err != nil {
				t.Fatal(err)
			}
		}
		comp, err := s.FindComputer(f.ctx, "t1", "cmp1")
		if err != nil {
			t.Fatal(err)
		}
		if comp.Usage.CPUMicros != 5000 || comp.Usage.PeakMemoryBytes != 99 {
			t.Errorf("computer usage %+v, want 5000 µs (1000 by the command, 4000 beyond it, charged once) and peak 99", comp.Usage)
		}
	})
}

// TestReleased_ReceiptUsage: a lease's receipt states what the computer was
// charged for the lease, its commands' usage and the CPU its sandbox used
// beyond them, not its commands' usage alone.
func TestReleased_ReceiptUsage(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		cmd, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		w := f.ready()
		cred := w.Credential
		if err := f.c.Report(f.ctx, cred, cmd.ID, &runtime.Report{State: bothy.RunRunning}); err != nil {
			t.Fatal(err)
		}
		exit := &bothy.Exit{ExecResult: bothy.ExecResult{Usage: bothy.Usage{CPUMicros: 1000, PeakMemoryBytes: 10, BytesWritten: 7}}}
		if err := f.c.Report(f.ctx, cred, cmd.ID, &runtime.Report{State: bothy.RunFinished, Exit: exit}); err != nil {
			t.Fatal(err)
		}
		total := &bothy.Usage{CPUMicros: 5000, PeakMemoryBytes: 99}
		for range 2 {
			if err := f.c.Released(f.ctx, cred, &runtime.ReleaseRequest{Disposition: bothy.LeaseReleased, Usage: total}); err != nil {
				t.Fatal(err)
			}
		}
		comp, err := s.FindComputer(f.ctx, "t1", "cmp1")
		if err != nil {
			t.Fatal(err)
		}
		r, err := f.c.LeaseReceipt(f.ctx, "t1", w.LeaseID)
		if err != nil {
			t.Fatal(err)
		}
		b, err := receipt.Verify(receipt.Encode(r), f.c.ReceiptKey().PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		if b.Usage.CPUMicros != comp.Usage.CPUMicros || b.Usage.CPUMicros != 5000 ||
			b.Usage.PeakMemoryBytes != comp.Usage.PeakMemoryBytes || b.Usage.BytesWritten != 7 {
			t.Errorf("lease receipt usage %+v, want what the computer was charged for the lease, %+v", b.Usage, comp.Usage)
		}
	})
}

package control_test

import (
	"testing"

	"github.com/bothyhq/bothy"
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

package storetest

import (
	"testing"

	"github.com/bothyhq/bothy"
)

// testCommitLease checks the lease rule of CommitRevision: a runtime
// commits only through its unreleased lease of the current generation, and
// a commit without a lease is refused while a lease runs.
func testCommitLease(t *testing.T, open opener) {
	run(t, "CommitRevision/Lease/OK", func(t *testing.T) {
		s := leaseSetup(t, open)
		l := mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		req := commitReq("acme", "c1", 1, 0)
		req.LeaseID = l.ID
		if _, err := s.CommitRevision(t.Context(), req); err != nil {
			t.Fatalf("commit through the running lease: %v", err)
		}
		if c := mustFindComputer(t, s, "acme", "c1"); c.Revision != 1 {
			t.Fatalf("revision %d after the lease's commit, want 1", c.Revision)
		}
	})
	run(t, "CommitRevision/Lease/ErrReleased", func(t *testing.T) {
		s := leaseSetup(t, open)
		l := mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		if err := s.ReleaseLease(t.Context(), "acme", l.ID, 1, bothy.LeaseReleased, "{}"); err != nil {
			t.Fatal(err)
		}
		before := mustFindComputer(t, s, "acme", "c1")
		req := commitReq("acme", "c1", 1, 0)
		req.LeaseID = l.ID
		_, err := s.CommitRevision(t.Context(), req)
		WantCode(t, err, bothy.ECONFLICT)
		checkUnchanged(t, s, before, 0)
	})
	run(t, "CommitRevision/Lease/ErrStaleGeneration", func(t *testing.T) {
		s := leaseSetup(t, open)
		l1 := mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		if err := s.ReleaseLease(t.Context(), "acme", l1.ID, 1, bothy.LeaseReleased, "{}"); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, s, newLease("acme", "c1", "l2", 2))
		before := mustFindComputer(t, s, "acme", "c1")
		// The old runtime names its own lease and generation: refused.
		req := commitReq("acme", "c1", 1, 0)
		req.LeaseID = l1.ID
		_, err := s.CommitRevision(t.Context(), req)
		WantCode(t, err, bothy.ECONFLICT)
		// Naming the new generation with the old lease is refused too.
		req = commitReq("acme", "c1", 2, 0)
		req.LeaseID = l1.ID
		_, err = s.CommitRevision(t.Context(), req)
		WantCode(t, err, bothy.ECONFLICT)
		checkUnchanged(t, s, before, 0)
	})
	run(t, "CommitRevision/Lease/ErrAPIWhileRunning", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		before := mustFindComputer(t, s, "acme", "c1")
		_, err := s.CommitRevision(t.Context(), commitReq("acme", "c1", 1, 0))
		WantCode(t, err, bothy.ECONFLICT)
		checkUnchanged(t, s, before, 0)
	})
}

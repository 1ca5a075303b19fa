package storetest

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
)

// newLease returns a lease of generation for the computer, expiring in a minute.
func newLease(tenantID, computerID, id string, generation int64) *bothy.Lease {
	return &bothy.Lease{
		ID: id, TenantID: tenantID, ComputerID: computerID, Generation: generation,
		Provider: "bwrap", Host: "host-1", SandboxRef: "v1:" + id,
		CPUMillis: 2000, MemoryBytes: 1 << 30, ScratchBytes: 10 << 30, CredentialDigest: "sha256:" + id,
		ExpiresAt: time.Now().Add(time.Minute),
	}
}

// mustAcquire acquires l.
func mustAcquire(t *testing.T, s bothy.Store, l *bothy.Lease) *bothy.Lease {
	t.Helper()
	if err := s.AcquireLease(t.Context(), l); err != nil {
		t.Fatalf("AcquireLease(%s/%s generation %d): %v", l.TenantID, l.ID, l.Generation, err)
	}
	return l
}

// mustFindLease returns the stored lease.
func mustFindLease(t *testing.T, s bothy.Store, tenantID, id string) *bothy.Lease {
	t.Helper()
	l, err := s.FindLease(t.Context(), tenantID, id)
	if err != nil {
		t.Fatalf("FindLease(%s/%s): %v", tenantID, id, err)
	}
	return l
}

// checkLease fails the test unless got equals want field by field.
func checkLease(t *testing.T, got, want *bothy.Lease) {
	t.Helper()
	g, w := *got, *want
	for _, p := range []struct {
		what string
		g, w *time.Time
	}{
		{"ReservedAt", &g.ReservedAt, &w.ReservedAt}, {"StartedAt", &g.StartedAt, &w.StartedAt},
		{"ReadyAt", &g.ReadyAt, &w.ReadyAt}, {"HeartbeatAt", &g.HeartbeatAt, &w.HeartbeatAt},
		{"ExpiresAt", &g.ExpiresAt, &w.ExpiresAt}, {"ReleasedAt", &g.ReleasedAt, &w.ReleasedAt},
	} {
		if p.g.IsZero() != p.w.IsZero() {
			t.Errorf("lease %s: %s = %v, want %v", want.ID, p.what, *p.g, *p.w)
		} else if !p.w.IsZero() {
			if d := diffTimes(p.what, *p.g, *p.w); d != "" {
				t.Errorf("lease %s: %s", want.ID, d)
			}
		}
		*p.g, *p.w = time.Time{}, time.Time{}
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("lease = %+v\nwant    %+v", g, w)
	}
}

// leaseSetup makes tenant acme with computer c1 at generation 0.
func leaseSetup(t *testing.T, open opener) bothy.Store {
	s := open(t)
	mustCreateTenant(t, s, "acme")
	mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1"})
	return s
}

func testLeases(t *testing.T, open opener) {
	run(t, "AcquireLease/OK", func(t *testing.T) {
		s := leaseSetup(t, open)
		before := mustFindComputer(t, s, "acme", "c1")
		l := newLease("acme", "c1", "l1", 1)
		l.StartedAt = time.Date(2025, 1, 2, 3, 4, 5, 6789, time.UTC)
		l.Disposition = "junk"
		mustAcquire(t, s, l)
		if l.ReservedAt.IsZero() || l.Disposition != "" || !l.ReleasedAt.IsZero() {
			t.Errorf("AcquireLease filled %+v; want ReservedAt set, no disposition, not released", l)
		}
		checkLease(t, mustFindLease(t, s, "acme", "l1"), l)
		active, err := s.ActiveLease(t.Context(), "acme", "c1")
		if err != nil {
			t.Fatal(err)
		}
		checkLease(t, active, l)
		c := mustFindComputer(t, s, "acme", "c1")
		if c.Generation != 1 || c.State != bothy.StateStarting {
			t.Errorf("computer at generation %d state %q, want 1 starting", c.Generation, c.State)
		}
		if c.Revision != before.Revision || c.UpdatedAt.Before(before.UpdatedAt) {
			t.Errorf("computer revision %d updated %v, was %d %v", c.Revision, c.UpdatedAt, before.Revision, before.UpdatedAt)
		}
	})

	run(t, "AcquireLease/GenerationIncrements", func(t *testing.T) {
		s := leaseSetup(t, open)
		for gen := int64(1); gen <= 3; gen++ {
			id := "l" + string(rune('0'+gen))
			// The generation the caller saw is gen-1; asking for anything
			// but the next one is refused.
			for _, wrong := range []int64{gen - 1, gen + 1} {
				if wrong >= 1 {
					WantCode(t, s.AcquireLease(t.Context(), newLease("acme", "c1", "x", wrong)), bothy.ECONFLICT)
				}
			}
			mustAcquire(t, s, newLease("acme", "c1", id, gen))
			if c := mustFindComputer(t, s, "acme", "c1"); c.Generation != gen {
				t.Fatalf("generation %d after acquire %d", c.Generation, gen)
			}
			if err := s.ReleaseLease(t.Context(), "acme", id, gen, bothy.LeaseReleased, ""); err != nil {
				t.Fatal(err)
			}
			if c := mustFindComputer(t, s, "acme", "c1"); c.Generation != gen || c.State != bothy.StateCold {
				t.Fatalf("generation %d state %q after release of %d, want %d cold", c.Generation, c.State, gen, gen)
			}
		}
	})

	run(t, "AcquireLease/ErrHeld", func(t *testing.T) {
		s := leaseSetup(t, open)
		l := mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		before := mustFindComputer(t, s, "acme", "c1")
		for _, gen := range []int64{1, 2} {
			WantCode(t, s.AcquireLease(t.Context(), newLease("acme", "c1", "l2", gen)), bothy.ECONFLICT)
		}
		checkComputer(t, mustFindComputer(t, s, "acme", "c1"), before)
		active, err := s.ActiveLease(t.Context(), "acme", "c1")
		if err != nil {
			t.Fatal(err)
		}
		checkLease(t, active, l)
		_, err = s.FindLease(t.Context(), "acme", "l2")
		WantCode(t, err, bothy.ENOTFOUND)
	})

	run(t, "AcquireLease/ErrDuplicateID", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c2"})
		mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		before := mustFindComputer(t, s, "acme", "c2")
		WantCode(t, s.AcquireLease(t.Context(), newLease("acme", "c2", "l1", 1)), bothy.ECONFLICT)
		// The generation move of c2 rolled back with the insert.
		checkComputer(t, mustFindComputer(t, s, "acme", "c2"), before)
	})

	run(t, "AcquireLease/ErrDestroyed", func(t *testing.T) {
		s := leaseSetup(t, open)
		if err := s.SetComputerState(t.Context(), "acme", "c1", bothy.StateDestroyed); err != nil {
			t.Fatal(err)
		}
		WantCode(t, s.AcquireLease(t.Context(), newLease("acme", "c1", "l1", 1)), bothy.ECONFLICT)
		if c := mustFindComputer(t, s, "acme", "c1"); c.Generation != 0 || c.State != bothy.StateDestroyed {
			t.Errorf("destroyed computer moved to generation %d state %q", c.Generation, c.State)
		}
	})

	run(t, "AcquireLease/ErrNotFound", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustCreateTenant(t, s, "other")
		WantCode(t, s.AcquireLease(t.Context(), newLease("acme", "nope", "l1", 1)), bothy.ENOTFOUND)
		WantCode(t, s.AcquireLease(t.Context(), newLease("other", "c1", "l1", 1)), bothy.ENOTFOUND)
		if c := mustFindComputer(t, s, "acme", "c1"); c.Generation != 0 {
			t.Errorf("another tenant moved the generation to %d", c.Generation)
		}
	})

	run(t, "AcquireLease/ErrInvalid", func(t *testing.T) {
		s := leaseSetup(t, open)
		for name, mod := range map[string]func(l *bothy.Lease){
			"no id":         func(l *bothy.Lease) { l.ID = "" },
			"bad computer":  func(l *bothy.Lease) { l.ComputerID = "../c1" },
			"generation 0":  func(l *bothy.Lease) { l.Generation = 0 },
			"no provider":   func(l *bothy.Lease) { l.Provider = "" },
			"negative cpu":  func(l *bothy.Lease) { l.CPUMillis = -1 },
			"no expiry":     func(l *bothy.Lease) { l.ExpiresAt = time.Time{} },
			"missing owner": func(l *bothy.Lease) { l.TenantID = "" },
		} {
			l := newLease("acme", "c1", "l1", 1)
			mod(l)
			if err := s.AcquireLease(t.Context(), l); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("%s: error %v, want code %q", name, err, bothy.EINVALID)
			}
		}
	})

	run(t, "AcquireLease/Concurrent", func(t *testing.T) {
		s := leaseSetup(t, open)
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				errs[i] = s.AcquireLease(t.Context(), newLease("acme", "c1", "l"+string(rune('a'+i)), 1))
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch bothy.ErrorCode(err) {
			case "":
				if winner >= 0 {
					t.Errorf("acquirers %d and %d both won", winner, i)
				}
				winner = i
			case bothy.ECONFLICT:
			default:
				t.Errorf("acquirer %d: %v", i, err)
			}
		}
		if winner < 0 {
			t.Fatal("no acquirer won")
		}
		active, err := s.ActiveLease(t.Context(), "acme", "c1")
		if err != nil {
			t.Fatal(err)
		} else if active.ID != "l"+string(rune('a'+winner)) || active.Generation != 1 {
			t.Errorf("active lease %s generation %d, want the winner's at 1", active.ID, active.Generation)
		}
		if c := mustFindComputer(t, s, "acme", "c1"); c.Generation != 1 {
			t.Errorf("generation %d after concurrent acquires, want 1", c.Generation)
		}
	})

	run(t, "HeartbeatLease/OK", func(t *testing.T) {
		s := leaseSetup(t, open)
		l := mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		exp := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		if err := s.HeartbeatLease(t.Context(), "acme", "l1", 1, exp); err != nil {
			t.Fatal(err)
		}
		got := mustFindLease(t, s, "acme", "l1")
		if got.HeartbeatAt.IsZero() {
			t.Error("HeartbeatAt not set")
		}
		if d := diffTimes("ExpiresAt", got.ExpiresAt, exp); d != "" {
			t.Error(d)
		}
		l.HeartbeatAt, l.ExpiresAt = got.HeartbeatAt, exp
		checkLease(t, got, l)
	})

	run(t, "HeartbeatLease/ErrStale", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustCreateTenant(t, s, "other")
		mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		exp := time.Now().Add(time.Hour)
		WantCode(t, s.HeartbeatLease(t.Context(), "acme", "l1", 2, exp), bothy.ECONFLICT)
		WantCode(t, s.HeartbeatLease(t.Context(), "acme", "l1", 0, exp), bothy.ECONFLICT)
		WantCode(t, s.HeartbeatLease(t.Context(), "acme", "nope", 1, exp), bothy.ENOTFOUND)
		WantCode(t, s.HeartbeatLease(t.Context(), "other", "l1", 1, exp), bothy.ENOTFOUND)
		WantCode(t, s.HeartbeatLease(t.Context(), "acme", "l1", 1, time.Time{}), bothy.EINVALID)
		if got := mustFindLease(t, s, "acme", "l1"); !got.HeartbeatAt.IsZero() {
			t.Errorf("a refused heartbeat set HeartbeatAt %v", got.HeartbeatAt)
		}
		if err := s.ReleaseLease(t.Context(), "acme", "l1", 1, bothy.LeaseReleased, ""); err != nil {
			t.Fatal(err)
		}
		WantCode(t, s.HeartbeatLease(t.Context(), "acme", "l1", 1, exp), bothy.ECONFLICT)
	})

	run(t, "ReleaseLease/OK", func(t *testing.T) {
		s := leaseSetup(t, open)
		l := mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		residue := `{"processes":0,"mounts":0}`
		if err := s.ReleaseLease(t.Context(), "acme", "l1", 1, bothy.LeaseQuarantined, residue); err != nil {
			t.Fatal(err)
		}
		got := mustFindLease(t, s, "acme", "l1")
		if got.ReleasedAt.IsZero() || got.ReleasedAt.Before(l.ReservedAt) {
			t.Errorf("ReleasedAt = %v, reserved at %v", got.ReleasedAt, l.ReservedAt)
		}
		l.ReleasedAt, l.Disposition, l.Residue = got.ReleasedAt, bothy.LeaseQuarantined, residue
		checkLease(t, got, l)
		_, err := s.ActiveLease(t.Context(), "acme", "c1")
		WantCode(t, err, bothy.ENOTFOUND)
		if c := mustFindComputer(t, s, "acme", "c1"); c.State != bothy.StateCold || c.Generation != 1 {
			t.Errorf("computer state %q generation %d after release, want cold 1", c.State, c.Generation)
		}
	})

	run(t, "ReleaseLease/KeepsDestroyed", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		if err := s.SetComputerState(t.Context(), "acme", "c1", bothy.StateDestroyed); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseLease(t.Context(), "acme", "l1", 1, bothy.LeaseReleased, "{}"); err != nil {
			t.Fatal(err)
		}
		if c := mustFindComputer(t, s, "acme", "c1"); c.State != bothy.StateDestroyed {
			t.Errorf("release moved a destroyed computer to %q", c.State)
		}
	})

	run(t, "ReleaseLease/Err", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustCreateTenant(t, s, "other")
		mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		WantCode(t, s.ReleaseLease(t.Context(), "acme", "l1", 2, bothy.LeaseReleased, ""), bothy.ECONFLICT)
		WantCode(t, s.ReleaseLease(t.Context(), "acme", "l1", 1, "gone", ""), bothy.EINVALID)
		WantCode(t, s.ReleaseLease(t.Context(), "acme", "l1", 1, bothy.LeaseReleased, "{not json"), bothy.EINVALID)
		WantCode(t, s.ReleaseLease(t.Context(), "acme", "nope", 1, bothy.LeaseReleased, ""), bothy.ENOTFOUND)
		WantCode(t, s.ReleaseLease(t.Context(), "other", "l1", 1, bothy.LeaseReleased, ""), bothy.ENOTFOUND)
		if _, err := s.ActiveLease(t.Context(), "acme", "c1"); err != nil {
			t.Fatalf("a refused release released the lease: %v", err)
		}
		if err := s.ReleaseLease(t.Context(), "acme", "l1", 1, bothy.LeaseLost, ""); err != nil {
			t.Fatal(err)
		}
		WantCode(t, s.ReleaseLease(t.Context(), "acme", "l1", 1, bothy.LeaseReleased, ""), bothy.ECONFLICT)
		if got := mustFindLease(t, s, "acme", "l1"); got.Disposition != bothy.LeaseLost {
			t.Errorf("a second release changed the disposition to %q", got.Disposition)
		}
	})

	run(t, "FindLease/ErrNotFound", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustCreateTenant(t, s, "other")
		mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		_, err := s.FindLease(t.Context(), "acme", "nope")
		WantCode(t, err, bothy.ENOTFOUND)
		_, err = s.FindLease(t.Context(), "other", "l1")
		WantCode(t, err, bothy.ENOTFOUND)
		_, err = s.ActiveLease(t.Context(), "other", "c1")
		WantCode(t, err, bothy.ENOTFOUND)
	})

	run(t, "ListExpiredLeases/OK", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "a")
		mustCreateTenant(t, s, "b")
		t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
		for _, x := range []struct {
			tenant, computer, lease string
			expires                 time.Time
		}{
			{"a", "c1", "la1", t0.Add(-time.Minute)},
			{"b", "c1", "lb1", t0.Add(-2 * time.Minute)},
			{"a", "c2", "la2", t0},
			{"b", "c2", "lb2", t0.Add(time.Second)},
			{"a", "c3", "la3", t0.Add(-time.Hour)}, // released below
		} {
			mustCreateComputer(t, s, x.tenant, &bothy.Computer{ID: x.computer})
			l := newLease(x.tenant, x.computer, x.lease, 1)
			l.ExpiresAt = x.expires
			mustAcquire(t, s, l)
		}
		if err := s.ReleaseLease(t.Context(), "a", "la3", 1, bothy.LeaseReleased, ""); err != nil {
			t.Fatal(err)
		}
		ids := func(limit int) []string {
			ls, err := s.ListExpiredLeases(t.Context(), t0, limit)
			if err != nil {
				t.Fatal(err)
			}
			out := []string{}
			for _, l := range ls {
				out = append(out, l.TenantID+"/"+l.ID)
			}
			return out
		}
		if got, want := ids(0), []string{"b/lb1", "a/la1", "a/la2"}; !reflect.DeepEqual(got, want) {
			t.Errorf("ListExpiredLeases = %q, want %q", got, want)
		}
		if got, want := ids(1), []string{"b/lb1"}; !reflect.DeepEqual(got, want) {
			t.Errorf("ListExpiredLeases(limit 1) = %q, want %q", got, want)
		}
		_, err := s.ListExpiredLeases(t.Context(), t0, -1)
		WantCode(t, err, bothy.EINVALID)
	})
}

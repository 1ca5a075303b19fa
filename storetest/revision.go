package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/bothyhq/bothy"
)

// commitReq returns a request to commit base+1 with the given packs.
func commitReq(tenantID, computerID string, generation, base int64, packs ...string) *bothy.CommitRequest {
	return &bothy.CommitRequest{
		TenantID:   tenantID,
		ComputerID: computerID,
		Generation: generation,
		Base:       base,
		RootDigest: fmt.Sprintf("root-%s-%d-%d", computerID, generation, base+1),
		Packs:      packs,
		Size:       1000 * (base + 1),
		FileCount:  base + 1,
		CreatedBy:  "api:test",
	}
}

// referenced returns the packs ReferencedPacks reports, in its order.
func referenced(t *testing.T, s bothy.Store, tenantID string) []string {
	t.Helper()
	packs := []string{}
	err := s.ReferencedPacks(t.Context(), tenantID, func(p string) error {
		packs = append(packs, p)
		return nil
	})
	if err != nil {
		t.Fatalf("ReferencedPacks(%s): %v", tenantID, err)
	}
	return packs
}

// checkUnchanged fails the test unless the computer and its revisions are as
// before a refused commit.
func checkUnchanged(t *testing.T, s bothy.Store, before *bothy.Computer, revs int) {
	t.Helper()
	checkComputer(t, mustFindComputer(t, s, before.TenantID, before.ID), before)
	list, err := s.ListRevisions(t.Context(), before.TenantID, before.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	} else if len(list) != revs {
		t.Errorf("a refused commit left %d revisions, want %d", len(list), revs)
	}
}

func testRevisions(t *testing.T, open opener) {
	run(t, "CommitRevision/OK", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1", Generation: 1})
		packs := [][]string{{"p1", "p2"}, {"p3", "p2", "p3"}, nil}
		for i, ps := range packs {
			base := int64(i)
			r := commitReq("acme", "c1", 1, base, ps...)
			rev := mustCommit(t, s, r)
			want := &bothy.Revision{TenantID: "acme", ComputerID: "c1", Number: base + 1, Parent: base, Generation: 1,
				RootDigest: r.RootDigest, Packs: ps, Size: r.Size, FileCount: r.FileCount, CreatedBy: "api:test", CreatedAt: rev.CreatedAt}
			checkRevision(t, rev, want)
			if rev.CreatedAt.IsZero() {
				t.Error("CreatedAt not filled")
			}
			found, err := s.FindRevision(t.Context(), "acme", "c1", base+1)
			if err != nil {
				t.Fatal(err)
			}
			checkRevision(t, found, want)
			c := mustFindComputer(t, s, "acme", "c1")
			if c.Revision != base+1 || c.RootDigest != r.RootDigest || c.Generation != 1 {
				t.Errorf("computer at revision %d root %q generation %d, want %d %q 1", c.Revision, c.RootDigest, c.Generation, base+1, r.RootDigest)
			}
		}
	})

	run(t, "CommitRevision/ErrStaleBase", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1"})
		mustCommit(t, s, commitReq("acme", "c1", 0, 0, "p1"))
		before := mustFindComputer(t, s, "acme", "c1")
		for _, base := range []int64{0, 2, 7} {
			_, err := s.CommitRevision(t.Context(), commitReq("acme", "c1", 0, base, "loser"))
			WantCode(t, err, bothy.ECONFLICT)
		}
		checkUnchanged(t, s, before, 1)
		if got := referenced(t, s, "acme"); !reflect.DeepEqual(got, []string{"p1"}) {
			t.Errorf("ReferencedPacks = %q after refused commits, want [p1]", got)
		}
	})

	run(t, "CommitRevision/ErrStaleGeneration", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		before := mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1", Generation: 2})
		for _, gen := range []int64{0, 1, 3} {
			_, err := s.CommitRevision(t.Context(), commitReq("acme", "c1", gen, 0, "loser"))
			WantCode(t, err, bothy.ECONFLICT)
		}
		checkUnchanged(t, s, before, 0)
		rev := mustCommit(t, s, commitReq("acme", "c1", 2, 0))
		if rev.Number != 1 || rev.Generation != 2 {
			t.Errorf("commit at the current generation made revision %d generation %d", rev.Number, rev.Generation)
		}
	})

	run(t, "CommitRevision/ErrNotFound", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		_, err := s.CommitRevision(t.Context(), commitReq("acme", "nope", 0, 0, "p1"))
		WantCode(t, err, bothy.ENOTFOUND)
		if got := referenced(t, s, "acme"); len(got) != 0 {
			t.Errorf("ReferencedPacks = %q, want none", got)
		}
	})

	run(t, "CommitRevision/ErrOtherTenant", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "a")
		mustCreateTenant(t, s, "b")
		before := mustCreateComputer(t, s, "a", &bothy.Computer{ID: "c1"})
		_, err := s.CommitRevision(t.Context(), commitReq("b", "c1", 0, 0, "p1"))
		WantCode(t, err, bothy.ENOTFOUND)
		checkUnchanged(t, s, before, 0)
		if got := referenced(t, s, "b"); len(got) != 0 {
			t.Errorf("ReferencedPacks(b) = %q, want none", got)
		}
	})

	run(t, "CommitRevision/ErrInvalid", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		before := mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1"})
		noRoot := commitReq("acme", "c1", 0, 0)
		noRoot.RootDigest = ""
		negative := commitReq("acme", "c1", 0, -1)
		badID := commitReq("acme", "c/1", 0, 0)
		for _, r := range []*bothy.CommitRequest{noRoot, negative, badID} {
			_, err := s.CommitRevision(t.Context(), r)
			WantCode(t, err, bothy.EINVALID)
		}
		checkUnchanged(t, s, before, 0)
	})

	run(t, "CommitRevision/Concurrent", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1"})
		const writers = 8
		for base := range int64(3) {
			var wg sync.WaitGroup
			start := make(chan struct{})
			revs := make([]*bothy.Revision, writers)
			errs := make([]error, writers)
			for i := range writers {
				wg.Go(func() {
					<-start
					r := commitReq("acme", "c1", 0, base, fmt.Sprintf("pack-%d-%d", base, i))
					r.RootDigest = fmt.Sprintf("root-%d-%d", base, i)
					revs[i], errs[i] = s.CommitRevision(t.Context(), r)
				})
			}
			close(start)
			wg.Wait()
			winner := -1
			for i, err := range errs {
				switch bothy.ErrorCode(err) {
				case "":
					if winner >= 0 {
						t.Fatalf("base %d: writers %d and %d both committed", base, winner, i)
					}
					winner = i
				case bothy.ECONFLICT:
				default:
					t.Fatalf("base %d: writer %d: %v, want success or %s", base, i, err, bothy.ECONFLICT)
				}
			}
			if winner < 0 {
				t.Fatalf("base %d: no writer committed", base)
			}
			c := mustFindComputer(t, s, "acme", "c1")
			if c.Revision != base+1 || c.RootDigest != revs[winner].RootDigest {
				t.Fatalf("base %d: computer at revision %d root %q, want %d %q", base, c.Revision, c.RootDigest, base+1, revs[winner].RootDigest)
			}
		}
		list, err := s.ListRevisions(t.Context(), "acme", "c1", 0, 0)
		if err != nil {
			t.Fatal(err)
		} else if len(list) != 3 {
			t.Fatalf("%d revisions, want 3", len(list))
		}
		if got := referenced(t, s, "acme"); len(got) != 3 {
			t.Errorf("ReferencedPacks = %q, want one pack per winning commit", got)
		}
	})

	run(t, "CommitRevision/ConcurrentComputers", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		const computers, commits = 8, 5
		for i := range computers {
			mustCreateComputer(t, s, "acme", &bothy.Computer{ID: fmt.Sprintf("c%d", i)})
		}
		var wg sync.WaitGroup
		errs := make([]error, computers)
		for i := range computers {
			wg.Go(func() {
				id := fmt.Sprintf("c%d", i)
				for base := range int64(commits) {
					if _, err := s.CommitRevision(t.Context(), commitReq("acme", id, 0, base, id+"-pack")); err != nil {
						errs[i] = fmt.Errorf("%s base %d: %w", id, base, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("commits to different computers interfered: %v", err)
		}
		for i := range computers {
			if c := mustFindComputer(t, s, "acme", fmt.Sprintf("c%d", i)); c.Revision != commits {
				t.Errorf("computer %s at revision %d, want %d", c.ID, c.Revision, commits)
			}
		}
	})

	run(t, "FindRevision/ErrNotFound", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "a")
		mustCreateTenant(t, s, "b")
		mustCreateComputer(t, s, "a", &bothy.Computer{ID: "c1"})
		mustCreateComputer(t, s, "b", &bothy.Computer{ID: "c1"})
		mustCommit(t, s, commitReq("a", "c1", 0, 0, "p1"))
		for _, tt := range []struct {
			tenant, computer string
			number           int64
		}{{"a", "c1", 0}, {"a", "c1", 2}, {"a", "nope", 1}, {"b", "c1", 1}} {
			_, err := s.FindRevision(t.Context(), tt.tenant, tt.computer, tt.number)
			if bothy.ErrorCode(err) != bothy.ENOTFOUND {
				t.Errorf("FindRevision(%s, %s, %d): %v, want code %q", tt.tenant, tt.computer, tt.number, err, bothy.ENOTFOUND)
			}
		}
	})

	run(t, "ListRevisions/OK", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1"})
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c2"})
		var revs []*bothy.Revision
		for base := range int64(5) {
			revs = append(revs, mustCommit(t, s, commitReq("acme", "c1", 0, base, fmt.Sprintf("p%d", base), "shared")))
		}
		mustCommit(t, s, commitReq("acme", "c2", 0, 0, "other"))
		slices.Reverse(revs)
		for _, tt := range []struct{ offset, limit, from, to int }{
			{0, 0, 0, 5}, {0, 2, 0, 2}, {2, 2, 2, 4}, {4, 2, 4, 5}, {5, 2, 5, 5},
		} {
			list, err := s.ListRevisions(t.Context(), "acme", "c1", tt.offset, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			want := revs[tt.from:tt.to]
			if len(list) != len(want) {
				t.Fatalf("offset %d limit %d: %d revisions, want %d", tt.offset, tt.limit, len(list), len(want))
			}
			for i := range want {
				checkRevision(t, list[i], want[i])
			}
		}
		_, err := s.ListRevisions(t.Context(), "acme", "c1", -1, 0)
		WantCode(t, err, bothy.EINVALID)
	})

	run(t, "ListRevisions/OtherTenant", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "a")
		mustCreateTenant(t, s, "b")
		mustCreateComputer(t, s, "a", &bothy.Computer{ID: "c1"})
		mustCommit(t, s, commitReq("a", "c1", 0, 0, "p1"))
		for _, tenant := range []string{"b", "nobody"} {
			list, err := s.ListRevisions(t.Context(), tenant, "c1", 0, 0)
			if err != nil {
				t.Fatal(err)
			} else if len(list) != 0 {
				t.Errorf("tenant %s sees %d revisions of another tenant's computer", tenant, len(list))
			}
		}
	})

	run(t, "ReferencedPacks/OK", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "a")
		mustCreateTenant(t, s, "b")
		mustCreateComputer(t, s, "a", &bothy.Computer{ID: "c1"})
		mustCreateComputer(t, s, "a", &bothy.Computer{ID: "c2"})
		mustCreateComputer(t, s, "b", &bothy.Computer{ID: "c1"})
		mustCommit(t, s, commitReq("a", "c1", 0, 0, "p1", "p2"))
		mustCommit(t, s, commitReq("a", "c1", 0, 1, "p2", "p3"))
		mustCommit(t, s, commitReq("a", "c2", 0, 0, "p3", "p4"))
		mustCommit(t, s, commitReq("b", "c1", 0, 0, "p4", "p5"))
		if got := referenced(t, s, "a"); !sameSet(got, []string{"p1", "p2", "p3", "p4"}) || len(got) != 4 {
			t.Errorf("ReferencedPacks(a) = %q, want p1 p2 p3 p4 once each", got)
		}
		if got := referenced(t, s, "b"); !sameSet(got, []string{"p4", "p5"}) || len(got) != 2 {
			t.Errorf("ReferencedPacks(b) = %q, want p4 p5 once each", got)
		}
		if got := referenced(t, s, "nobody"); len(got) != 0 {
			t.Errorf("ReferencedPacks(nobody) = %q, want none", got)
		}
	})

	run(t, "ReferencedPacks/StopsOnError", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1"})
		mustCommit(t, s, commitReq("acme", "c1", 0, 0, "p1", "p2", "p3"))
		calls := 0
		err := s.ReferencedPacks(t.Context(), "acme", func(string) error {
			calls++
			return errStop
		})
		if !errors.Is(err, errStop) {
			t.Errorf("ReferencedPacks returned %v, want the callback's error", err)
		}
		if calls != 1 {
			t.Errorf("callback ran %d times after an error, want 1", calls)
		}
	})

	run(t, "ReferencedPacks/Many", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1"})
		var packs []string
		for i := range 2500 {
			packs = append(packs, fmt.Sprintf("pack-%05d", i))
		}
		mustCommit(t, s, commitReq("acme", "c1", 0, 0, packs...))
		mustCommit(t, s, commitReq("acme", "c1", 0, 1, packs[1000:1500]...))
		if got := referenced(t, s, "acme"); len(got) != len(packs) || !sameSet(got, packs) {
			t.Errorf("ReferencedPacks returned %d packs, want %d distinct", len(got), len(packs))
		}
		rev, err := s.FindRevision(t.Context(), "acme", "c1", 1)
		if err != nil {
			t.Fatal(err)
		} else if !sameSet(rev.Packs, packs) || len(rev.Packs) != len(packs) {
			t.Errorf("revision 1 lists %d packs, want %d", len(rev.Packs), len(packs))
		}
	})
}

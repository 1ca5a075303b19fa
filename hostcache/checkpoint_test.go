package hostcache_test

import (
	"context"
	mrand "math/rand/v2"
	"testing"

	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/hostcache"
)

// checkEquivalent checkpoints m's upper layer on top of base and the whole
// merged directory, and fails unless both give the same root and totals, and
// the overlay result's pack list restores to that root.
func checkEquivalent(t *testing.T, repo *checkpoint.Repo, m *hostcache.Overlay, base *checkpoint.Snapshot, baseRes *checkpoint.Result, parent *checkpoint.Snapshot) *hostcache.Result {
	t.Helper()
	ctx := context.Background()
	got, err := m.Checkpoint(ctx, base, hostcache.CheckpointOptions{
		Parent: parent, BaseSize: baseRes.Size, BaseFileCount: baseRes.FileCount})
	if err != nil {
		t.Fatal(err)
	}
	want, err := repo.Checkpoint(ctx, m.Merged, nil, checkpoint.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Root != want.Root {
		changes, _ := checkpoint.Diff(ctx, open(t, repo, want.Root, want.Packs), open(t, repo, got.Root, got.Packs))
		t.Fatalf("overlay checkpoint root %s, full checkpoint root %s; differences %v", got.Root, want.Root, changes)
	}
	if got.Size != want.Size || got.FileCount != want.FileCount {
		t.Fatalf("overlay totals %d bytes/%d files, full %d/%d", got.Size, got.FileCount, want.Size, want.FileCount)
	}
	// Every object of the root is in the listed packs: a restore works.
	dir := t.TempDir() + "/r"
	if err := open(t, repo, got.Root, got.Packs).Restore(ctx, dir, checkpoint.RestoreOptions{}); err != nil {
		t.Fatalf("restore the overlay result: %v", err)
	}
	return got
}

func TestMount_Checkpoint(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name string
		opts hostcache.MountOptions
	}{{"RedirectOff", hostcache.MountOptions{}}, {"RedirectOn", hostcache.MountOptions{RedirectDir: true}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			repo := newRepo(t)
			rng := mrand.New(mrand.NewPCG(42, 7))
			src := t.TempDir()
			writeTree(t, src, rng, 150)
			base, baseRes := snapshotOf(t, repo, src)
			c, err := hostcache.Open(t.TempDir())
			must(t, err)
			lower, err := c.Materialize(ctx, tenant, base)
			must(t, err)
			m := mount(t, lower, tc.opts)

			// Nothing changed: the base root.
			res := checkEquivalent(t, repo, m, base, baseRes, nil)
			if res.Root != base.Root() {
				t.Fatal("an empty upper layer changed the root")
			}
			// Four rounds of 50 operations in one lease; each checkpoint
			// writes on top of the previous one, as a runtime does.
			parent := base
			var redirects, opaque, whiteouts int64
			for round := range 4 {
				randomOps(t, m.Merged, rng, 50)
				res = checkEquivalent(t, repo, m, base, baseRes, parent)
				parent = open(t, repo, res.Root, res.Packs)
				redirects += res.Stats.Redirects
				opaque += res.Stats.OpaqueDirs
				whiteouts += res.Stats.Whiteouts
				t.Logf("round %d: %+v", round, res.Stats)
			}
			if whiteouts == 0 || opaque == 0 {
				t.Errorf("the operations made no whiteouts (%d) or opaque dirs (%d)", whiteouts, opaque)
			}
			if tc.opts.RedirectDir && redirects == 0 {
				t.Errorf("no redirected directory was checkpointed")
			}
			// A checkpoint of an unchanged upper on top of the previous one writes nothing new.
			again, err := m.Checkpoint(ctx, base, hostcache.CheckpointOptions{Parent: parent})
			must(t, err)
			if again.Root != res.Root || again.Stats.NewBlobs != 0 || again.Stats.PacksWritten != 0 {
				t.Fatalf("unchanged checkpoint: %+v", again.Stats)
			}
		})
	}
}

func TestMount_CheckpointChain(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	repo := newRepo(t)
	rng := mrand.New(mrand.NewPCG(9, 9))
	src := t.TempDir()
	writeTree(t, src, rng, 120)
	base, baseRes := snapshotOf(t, repo, src)
	c, err := hostcache.Open(t.TempDir())
	must(t, err)
	// Each lease starts from the previous lease's revision, materialized.
	for lease := range 4 {
		lower, err := c.Materialize(ctx, tenant, base)
		must(t, err)
		m := mount(t, lower, hostcache.MountOptions{})
		randomOps(t, m.Merged, rng, 50)
		res := checkEquivalent(t, repo, m, base, baseRes, nil)
		must(t, m.Remove(ctx))
		t.Logf("lease %d: %d files, %d bytes, %+v", lease, res.FileCount, res.Size, res.Stats)
		base = open(t, repo, res.Root, res.Packs)
		baseRes = &checkpoint.Result{Root: res.Root, Packs: res.Packs, Size: res.Size, FileCount: res.FileCount}
	}
	if st := c.Stats(); st.Restores != 4 {
		t.Fatalf("stats %+v, want 4 restores", st)
	}
}

func TestMount_CheckpointEmptyBase(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	repo := newRepo(t)
	base := open(t, repo, repo.EmptyTree(), nil)
	c, err := hostcache.Open(t.TempDir())
	must(t, err)
	lower, err := c.Materialize(ctx, tenant, base)
	must(t, err)
	m := mount(t, lower, hostcache.MountOptions{})
	randomOps(t, m.Merged, mrand.New(mrand.NewPCG(5, 5)), 60)
	checkEquivalent(t, repo, m, base, &checkpoint.Result{}, nil)
}

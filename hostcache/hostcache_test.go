package hostcache_test

import (
	"context"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/hostcache"
	"github.com/bothyhq/bothy/mountinfo"
)

func TestCache_Materialize(t *testing.T) {
	ctx := context.Background()
	repo := newRepo(t)
	src := t.TempDir()
	writeTree(t, src, mrand.New(mrand.NewPCG(1, 1)), 60)
	snap, _ := snapshotOf(t, repo, src)

	t.Run("OK", func(t *testing.T) {
		c, err := hostcache.Open(t.TempDir())
		must(t, err)
		dir, err := c.Materialize(ctx, tenant, snap)
		must(t, err)
		if got, want := hashTree(t, dir), hashTree(t, src); got != want {
			t.Fatal("materialized tree differs from the source")
		}
		start := time.Now()
		dir2, err := c.Materialize(ctx, tenant, snap)
		must(t, err)
		if dir2 != dir {
			t.Fatalf("second Materialize gave %s, want %s", dir2, dir)
		}
		if d := time.Since(start); d > 50*time.Millisecond {
			t.Errorf("cached Materialize took %v", d)
		}
		if st := c.Stats(); st.Restores != 1 || st.Hits != 1 {
			t.Fatalf("stats %+v, want 1 restore and 1 hit", st)
		}
		// A second process's Cache on the same directory finds it too.
		c2, err := hostcache.Open(c.Dir())
		must(t, err)
		if _, err := c2.Materialize(ctx, tenant, snap); err != nil {
			t.Fatal(err)
		} else if st := c2.Stats(); st.Restores != 0 || st.Hits != 1 {
			t.Fatalf("stats %+v, want a hit", st)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		c, err := hostcache.Open(t.TempDir())
		must(t, err)
		var wg sync.WaitGroup
		dirs := make([]string, 4)
		errs := make([]error, 4)
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dirs[i], errs[i] = c.Materialize(ctx, tenant, snap)
			}()
		}
		wg.Wait()
		for i := range 4 {
			must(t, errs[i])
			if dirs[i] != dirs[0] {
				t.Fatalf("dirs differ: %v", dirs)
			}
		}
		if st := c.Stats(); st.Restores != 1 {
			t.Fatalf("stats %+v, want one restore", st)
		}
		// Two Cache values (as two processes would) race; one rename wins.
		c3, _ := hostcache.Open(t.TempDir())
		c4, _ := hostcache.Open(c3.Dir())
		var d3, d4 string
		var e3, e4 error
		wg.Add(2)
		go func() { defer wg.Done(); d3, e3 = c3.Materialize(ctx, tenant, snap) }()
		go func() { defer wg.Done(); d4, e4 = c4.Materialize(ctx, tenant, snap) }()
		wg.Wait()
		must(t, e3)
		must(t, e4)
		if d3 != d4 || hashTree(t, d3) != hashTree(t, src) {
			t.Fatal("racing caches disagree")
		}
		if names := sortedNames(filepath.Dir(d3)); len(names) != 2 {
			t.Fatalf("cache holds %v, want the tree and its record only", names)
		}
	})

	t.Run("Empty", func(t *testing.T) {
		c, err := hostcache.Open(t.TempDir())
		must(t, err)
		empty := open(t, repo, repo.EmptyTree(), nil)
		dir, err := c.Materialize(ctx, tenant, empty)
		must(t, err)
		if names := sortedNames(dir); len(names) != 0 {
			t.Fatalf("empty root holds %v", names)
		}
	})

	t.Run("ErrInvalidTenant", func(t *testing.T) {
		c, _ := hostcache.Open(t.TempDir())
		if _, err := c.Materialize(ctx, "../x", snap); err == nil {
			t.Fatal("want an error")
		}
	})
}

func TestCache_Evict(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	repo := newRepo(t)
	c, err := hostcache.Open(t.TempDir())
	must(t, err)
	c.MinAge = 7*time.Minute + 30*time.Second
	var dirs []string
	var roots []checkpoint.Hash
	for i := range 4 {
		src := t.TempDir()
		must(t, os.WriteFile(filepath.Join(src, "f"), randBytes(mrand.New(mrand.NewPCG(uint64(i), 2)), 64<<10), 0o644))
		snap, _ := snapshotOf(t, repo, src)
		dir, err := c.Materialize(ctx, tenant, snap)
		must(t, err)
		dirs, roots = append(dirs, dir), append(roots, snap.Root())
		// Distinct access times, oldest first.
		old := time.Now().Add(time.Duration(i-10) * time.Minute)
		must(t, os.Chtimes(dir+".used", old, old))
	}
	mount(t, dirs[0], hostcache.MountOptions{}) // the oldest is in use
	keep := func(tenantID, root string) bool { return root == roots[1].String() }
	res, err := c.Evict(ctx, keep, 0)
	must(t, err)
	if res.Trees != 4 || res.Evicted != 1 || res.InUse != 1 || res.Kept != 1 || res.Young != 1 {
		t.Fatalf("evict %+v", res)
	}
	for i, d := range dirs {
		_, err := os.Stat(d)
		if gone := err != nil; gone != (i == 2) {
			t.Fatalf("tree %d gone=%v", i, gone)
		}
	}
	c.MinAge = 5 * time.Minute
	res, err = c.Evict(ctx, nil, 0)
	must(t, err)
	if res.Evicted != 2 || res.InUse != 1 {
		t.Fatalf("evict %+v", res)
	}
	if names := sortedNames(filepath.Dir(dirs[0])); len(names) != 2 {
		t.Fatalf("cache holds %v, want the mounted tree and its record", names)
	}
}

func TestMount(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	repo := newRepo(t)
	src := t.TempDir()
	writeTree(t, src, mrand.New(mrand.NewPCG(3, 3)), 40)
	snap, _ := snapshotOf(t, repo, src)
	c, err := hostcache.Open(t.TempDir())
	must(t, err)
	lower, err := c.Materialize(ctx, tenant, snap)
	must(t, err)
	before := hashTree(t, lower)

	m := mount(t, lower, hostcache.MountOptions{})
	if hashTree(t, m.Merged) != hashTree(t, src) {
		t.Fatal("merged view differs from the source")
	}
	randomOps(t, m.Merged, mrand.New(mrand.NewPCG(4, 4)), 100)
	if after := hashTree(t, lower); after != before {
		t.Fatal("writes through the overlay changed the lower tree")
	}
	if names := sortedNames(m.Upper); len(names) == 0 {
		t.Fatal("upper is empty after writes")
	}
	// Mounting again on the same lease directory attaches to the mount.
	m2, err := hostcache.Mount(ctx, lower, filepath.Dir(m.Merged), hostcache.MountOptions{})
	must(t, err)
	if m2.Merged != m.Merged {
		t.Fatal("re-mount changed paths")
	}
	if mounts, _ := hostcache.OverlayMounts(m.Merged); len(mounts) != 1 {
		t.Fatalf("mounts %v, want one", mounts)
	}
	must(t, m.Remove(ctx))
	if mounts, _ := hostcache.OverlayMounts(m.Merged); len(mounts) != 0 {
		t.Fatalf("mounts left: %v", mounts)
	}
	must(t, m.Unmount(ctx)) // idempotent
}

// TestMount_Volatile: a volatile overlay works like any other (writes,
// checkpoint of the merged view), a second Mount while it is mounted
// attaches to it, and once unmounted its upper layer is refused by the
// kernel, as Volatile says: a lease cannot be resumed from it.
func TestMount_Volatile(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	repo := newRepo(t)
	src := t.TempDir()
	writeTree(t, src, mrand.New(mrand.NewPCG(5, 5)), 20)
	snap, _ := snapshotOf(t, repo, src)
	c, err := hostcache.Open(t.TempDir())
	must(t, err)
	lower, err := c.Materialize(ctx, tenant, snap)
	must(t, err)
	opts := hostcache.MountOptions{Volatile: true, RedirectDir: true}
	m := mount(t, lower, opts)
	mounts, err := mountinfo.Read()
	must(t, err)
	volatile := false
	for _, mi := range mounts {
		// Shown as fsync=volatile by current kernels, volatile by older.
		if fsync, _ := mi.Option("fsync"); mi.Point == m.Merged && (fsync == "volatile" || strings.Contains(mi.SuperOptions+",", ",volatile,")) {
			volatile = true
		}
	}
	if !volatile {
		t.Fatal("the overlay is not mounted volatile")
	}
	randomOps(t, m.Merged, mrand.New(mrand.NewPCG(6, 6)), 50)
	want := hashTree(t, m.Merged)
	res, err := m.Checkpoint(ctx, snap, hostcache.CheckpointOptions{})
	must(t, err)
	got, err := repo.Open(ctx, res.Root.String(), res.Packs)
	must(t, err)
	out := t.TempDir()
	must(t, got.Restore(ctx, out, checkpoint.RestoreOptions{}))
	if hashTree(t, out) != want {
		t.Fatal("the checkpoint of a volatile overlay differs from its merged view")
	}
	if _, err := hostcache.Mount(ctx, lower, filepath.Dir(m.Merged), opts); err != nil {
		t.Fatalf("attaching to the mounted overlay: %v", err)
	}
	must(t, m.Unmount(ctx))
	if _, err := hostcache.Mount(ctx, lower, filepath.Dir(m.Merged), opts); err == nil {
		t.Fatal("a volatile upper layer was mounted again after its unmount")
	}
	must(t, m.Remove(ctx))
}

// TestCache_MaxBytes: a cache over MaxBytes evicts, when it materializes a
// revision, the least recently used trees no lease mounts, and never the
// one it materializes.
func TestCache_MaxBytes(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	repo := newRepo(t)
	c, err := hostcache.Open(t.TempDir())
	must(t, err)
	c.MinAge, c.MaxBytes = time.Nanosecond, 1
	var dirs []string
	for i := range 3 {
		src := t.TempDir()
		must(t, os.WriteFile(filepath.Join(src, "f"), randBytes(mrand.New(mrand.NewPCG(uint64(i), 7)), 64<<10), 0o644))
		snap, _ := snapshotOf(t, repo, src)
		dir, err := c.Materialize(ctx, tenant, snap)
		must(t, err)
		dirs = append(dirs, dir)
		if i == 0 {
			mount(t, dir, hostcache.MountOptions{}) // a live lease's
		}
		time.Sleep(10 * time.Millisecond) // distinct last uses
	}
	for i, d := range dirs {
		_, err := os.Stat(d)
		if gone := err != nil; gone != (i == 1) {
			t.Errorf("tree %d gone=%v, want only the unused older tree 1 evicted", i, gone)
		}
	}
}

package hostcache_test

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/hostcache"
)

// workspace10MiB returns a snapshot of a 10 MiB workspace: 160 files of
// 64 KiB in 16 directories.
func workspace10MiB(b *testing.B) *checkpoint.Snapshot {
	b.Helper()
	repo := newRepo(b)
	src := b.TempDir()
	rng := mrand.New(mrand.NewPCG(10, 10))
	for d := range 16 {
		dir := filepath.Join(src, fmt.Sprintf("dir%02d", d))
		must(b, os.Mkdir(dir, 0o755))
		for f := range 10 {
			must(b, os.WriteFile(filepath.Join(dir, fmt.Sprintf("file%02d", f)), randBytes(rng, 64<<10), 0o644))
		}
	}
	snap, _ := snapshotOf(b, repo, src)
	return snap
}

// warmCache returns the snapshot of a 10 MiB workspace and a new cache that
// holds it, materialized once.
func warmCache(ctx context.Context, b *testing.B) (*hostcache.Cache, *checkpoint.Snapshot) {
	b.Helper()
	snap := workspace10MiB(b)
	c, err := hostcache.Open(b.TempDir())
	must(b, err)
	if _, err := c.Materialize(ctx, tenant, snap); err != nil {
		b.Fatal(err)
	}
	return c, snap
}

// benchWarmStart times lease starts on a cached revision: Materialize (a
// hit), mount the overlay with opts, unmount. With opts.IDMapUID set, the
// lower layer must be idmapped.
func benchWarmStart(b *testing.B, opts hostcache.MountOptions) {
	b.Helper()
	needRoot(b)
	ctx := context.Background()
	c, snap := warmCache(ctx, b)
	leaseDir := b.TempDir()
	b.ResetTimer()
	for b.Loop() {
		lower, err := c.Materialize(ctx, tenant, snap)
		if err != nil {
			b.Fatal(err)
		}
		m, err := hostcache.Mount(ctx, lower, leaseDir, opts)
		if err != nil {
			b.Fatal(err)
		} else if opts.IDMapUID != 0 && !m.IDMapped {
			b.Fatal(err, m.IDMapErr)
		}
		if err := m.Unmount(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWarmStart is a lease start on a cached revision: Materialize
// (a hit), mount the overlay, unmount.
func BenchmarkWarmStart(b *testing.B) {
	benchWarmStart(b, hostcache.MountOptions{})
}

// BenchmarkColdMaterialize restores a 10 MiB workspace into an empty cache.
func BenchmarkColdMaterialize(b *testing.B) {
	ctx := context.Background()
	// Warm the repo's pack table and frame caches: the figure is the local
	// restore, not the first download.
	_, snap := warmCache(ctx, b)
	b.SetBytes(10 << 20)
	b.ResetTimer()
	root := b.TempDir()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		c, err := hostcache.Open(filepath.Join(root, fmt.Sprint(i)))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := c.Materialize(ctx, tenant, snap); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(c.Dir()) // keep the disk from filling over the run
		b.StartTimer()
	}
}

// BenchmarkWarmStartIDMap is BenchmarkWarmStart with the lower layer
// idmapped: a user namespace (a child process), a clone of the tree, two
// mounts and two unmounts.
func BenchmarkWarmStartIDMap(b *testing.B) {
	benchWarmStart(b, hostcache.MountOptions{IDMapUID: testUID})
}

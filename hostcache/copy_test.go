package hostcache_test

import (
	"context"
	"errors"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/hostcache"
)

// These tests need no root: a Copy mounts nothing.

// randomBase writes a random tree of files entries and returns a repo,
// the tree's directory and its snapshot.
func randomBase(t *testing.T, rng *mrand.Rand, files int) (*checkpoint.Repo, string, *checkpoint.Snapshot) {
	t.Helper()
	repo := newRepo(t)
	src := t.TempDir()
	writeTree(t, src, rng, files)
	base, _ := snapshotOf(t, repo, src)
	return repo, src, base
}

// TestCopyIn_Checkpoint: a copy holds the base exactly, and each
// checkpoint of it, incremental through its stat cache, has the root and
// totals of a full checkpoint of the same tree without one.
func TestCopyIn_Checkpoint(t *testing.T) {
	ctx := context.Background()
	rng := mrand.New(mrand.NewPCG(42, 9))
	repo, src, base := randomBase(t, rng, 150)
	c, err := hostcache.CopyIn(ctx, base, filepath.Join(t.TempDir(), "ws"))
	must(t, err)
	if got, want := hashTree(t, c.Path()), hashTree(t, src); got != want {
		t.Fatalf("the copy differs from the tree of its base")
	}
	if n := c.WrittenBytes(); n != 0 {
		t.Errorf("a fresh copy has written %d bytes, want 0", n)
	}
	parent := base
	for round := range 4 {
		ownerWritable(t, c.Path())
		randomOps(t, c.Path(), rng, 40)
		got, err := c.Checkpoint(ctx, base, hostcache.CheckpointOptions{Parent: parent})
		must(t, err)
		want, err := repo.Checkpoint(ctx, c.Path(), nil, checkpoint.CheckpointOptions{})
		must(t, err)
		if got.Root != want.Root || got.Size != want.Size || got.FileCount != want.FileCount {
			t.Fatalf("round %d: copy checkpoint %s (%d bytes, %d files), full %s (%d, %d)",
				round, got.Root, got.Size, got.FileCount, want.Root, want.Size, want.FileCount)
		}
		parent = open(t, repo, got.Root, got.Packs)
		if err := parent.Restore(ctx, filepath.Join(t.TempDir(), "r"), checkpoint.RestoreOptions{}); err != nil {
			t.Fatalf("round %d: restore the copy's checkpoint: %v", round, err)
		}
		if round == 0 && got.Stats.FilesRead == 0 {
			t.Errorf("round %d read no file although files changed", round)
		}
	}

	t.Run("SameSizeAndMtime", func(t *testing.T) {
		// Out of the racy window, so the stat cache holds the file; then
		// new content of the same size under the old mtime: only the
		// ctime tells, and the checkpoint must read it.
		p := filepath.Join(c.Path(), "same")
		must(t, os.WriteFile(p, []byte("aaaaa"), 0o644))
		res, err := c.Checkpoint(ctx, base, hostcache.CheckpointOptions{Parent: parent})
		must(t, err)
		first := open(t, repo, res.Root, res.Packs)
		fi, err := os.Stat(p)
		must(t, err)
		time.Sleep(100 * time.Millisecond)
		if _, err := c.Checkpoint(ctx, base, hostcache.CheckpointOptions{Parent: first}); err != nil {
			t.Fatal(err)
		}
		must(t, os.WriteFile(p, []byte("bbbbb"), 0o644))
		must(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
		res, err = c.Checkpoint(ctx, base, hostcache.CheckpointOptions{Parent: first})
		must(t, err)
		if res.Root == first.Root() {
			t.Fatalf("new content of the same size and mtime is not in the checkpoint")
		}
		parent = open(t, repo, res.Root, res.Packs)
	})

	t.Run("WrittenBytes", func(t *testing.T) {
		// On a fresh copy: what the random operations deleted of the
		// base would offset what this writes.
		fresh, err := hostcache.CopyIn(ctx, base, filepath.Join(t.TempDir(), "ws"))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(fresh.Path(), "big"), randBytes(rng, 1<<20), 0o644))
		if n := fresh.WrittenBytes(); n < 1<<20 {
			t.Errorf("after a 1 MiB write WrittenBytes is %d", n)
		}
		must(t, fresh.Remove(ctx))
	})

	t.Run("Again", func(t *testing.T) {
		// A restarted agent's CopyIn finds the tree and keeps its writes.
		want := hashTree(t, c.Path())
		again, err := hostcache.CopyIn(ctx, base, c.Dir)
		must(t, err)
		if hashTree(t, again.Path()) != want {
			t.Fatalf("CopyIn of a lease directory that holds a copy changed it")
		}
		if again.WrittenBytes() != c.WrittenBytes() {
			t.Errorf("WrittenBytes after CopyIn again: %d, before %d", again.WrittenBytes(), c.WrittenBytes())
		}
	})

	t.Run("Remove", func(t *testing.T) {
		// A read-only directory too, which a process without
		// CAP_DAC_OVERRIDE cannot empty as it is.
		ro := filepath.Join(c.Path(), "ro")
		must(t, os.Mkdir(ro, 0o755))
		must(t, os.WriteFile(filepath.Join(ro, "f"), []byte("x"), 0o444))
		must(t, os.Chmod(ro, 0o555))
		must(t, c.Remove(ctx))
		if _, err := os.Lstat(c.Dir); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("after Remove the lease directory is still there (%v)", err)
		}
		must(t, (&hostcache.Copy{Dir: c.Dir}).Remove(ctx))
	})
}

// ownerWritable gives the owner write access to everything under dir, as
// a command of the agent's user (without CAP_DAC_OVERRIDE) would need to
// before randomOps rewrites what it finds.
func ownerWritable(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		add := fs.FileMode(0o200)
		if d.IsDir() {
			add = 0o700
		}
		return os.Chmod(p, fi.Mode().Perm()|add)
	})
	must(t, err)
}

// TestCopyIn_Interrupted: a tree whose restore did not finish is restored
// again.
func TestCopyIn_Interrupted(t *testing.T) {
	ctx := context.Background()
	_, src, base := randomBase(t, mrand.New(mrand.NewPCG(1, 2)), 30)
	dir := filepath.Join(t.TempDir(), "ws")
	must(t, os.MkdirAll(filepath.Join(dir, "tree.tmp", "partial"), 0o755))
	c, err := hostcache.CopyIn(ctx, base, dir)
	must(t, err)
	if hashTree(t, c.Path()) != hashTree(t, src) {
		t.Fatalf("the copy differs from the tree of its base")
	}
	if _, err := os.Lstat(filepath.Join(dir, "tree.tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the interrupted restore is still there (%v)", err)
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]hostcache.Mode{"": hostcache.ModeOverlay, "overlay": hostcache.ModeOverlay, "copy": hostcache.ModeCopy} {
		if got, err := hostcache.ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := hostcache.ParseMode("bind"); bothy.ErrorCode(err) != bothy.EINVALID {
		t.Errorf("ParseMode(bind): %v, want EINVALID", err)
	}
}

// TestWrittenBytes_Sparse: a sparse file counts by its apparent size, as
// if its zeros were written, in a Copy and in an Overlay, so that
// truncate cannot pass the scratch limit for free (a checkpoint or a
// restore of the file could otherwise write every zero).
func TestWrittenBytes_Sparse(t *testing.T) {
	ctx := context.Background()
	const size = 32 << 20
	check := func(t *testing.T, ws hostcache.Workspace) {
		f, err := os.Create(filepath.Join(ws.Path(), "sparse"))
		must(t, err)
		must(t, f.Truncate(size))
		must(t, f.Close())
		if n := ws.WrittenBytes(); n < size {
			t.Errorf("after truncate -s %d WrittenBytes is %d", size, n)
		}
	}
	_, _, base := randomBase(t, mrand.New(mrand.NewPCG(5, 5)), 5)
	t.Run("Copy", func(t *testing.T) {
		c, err := hostcache.CopyIn(ctx, base, filepath.Join(t.TempDir(), "ws"))
		must(t, err)
		ownerWritable(t, c.Path())
		check(t, c)
		must(t, c.Remove(ctx))
	})
	t.Run("Overlay", func(t *testing.T) {
		needRoot(t)
		cache, err := hostcache.Open(t.TempDir())
		must(t, err)
		lower, err := cache.Materialize(ctx, tenant, base)
		must(t, err)
		check(t, mount(t, lower, hostcache.MountOptions{}))
	})
}

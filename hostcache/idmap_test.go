package hostcache_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/hostcache"
)

// testUID is a host uid no one else uses, as a sandbox's would be.
const testUID = 290001

// searchableDir returns a new directory that testUID can traverse to.
func searchableDir(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	must(tb, os.Chmod(dir, 0o711))
	must(tb, os.Chmod(filepath.Dir(dir), 0o711))
	return dir
}

// asUID runs script in dir as uid (gid the same, no groups).
func asUID(tb testing.TB, uid int, dir, script string) {
	tb.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("%q as uid %d: %v: %s", script, uid, err, out)
	}
}

// treeOf lists the paths under dir, relative and sorted.
func treeOf(tb testing.TB, dir string) []string {
	tb.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			out = append(out, strings.TrimPrefix(p, dir+"/"))
		}
		return err
	})
	must(tb, err)
	slices.Sort(out)
	return out
}

func TestMount_IDMap(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	repo := newRepo(t)
	src := t.TempDir()
	for d := range 40 {
		dir := filepath.Join(src, fmt.Sprintf("d%02d", d))
		must(t, os.Mkdir(dir, 0o755))
		for f := range 50 {
			must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", f)), []byte(fmt.Sprintf("file %d/%d\n", d, f)), 0o644))
		}
	}
	must(t, os.Symlink("d00/f00", filepath.Join(src, "link")))
	base, baseRes := snapshotOf(t, repo, src)
	c, err := hostcache.Open(t.TempDir())
	must(t, err)
	lower, err := c.Materialize(ctx, tenant, base)
	must(t, err)
	before := hashTree(t, lower)

	leaseDir := searchableDir(t)
	opts := hostcache.MountOptions{RedirectDir: true, IDMapUID: testUID}
	m, err := hostcache.Mount(ctx, lower, leaseDir, opts)
	must(t, err)
	t.Cleanup(func() { m.Unmount(ctx) })
	if !m.IDMapped {
		t.Fatalf("the overlay is not idmapped: %v", m.IDMapErr)
	}

	t.Run("OwnedByUID", func(t *testing.T) {
		n := 0
		filepath.WalkDir(m.Merged, func(p string, d fs.DirEntry, err error) error {
			must(t, err)
			fi, err := os.Lstat(p)
			must(t, err)
			st := fi.Sys().(*syscall.Stat_t)
			if st.Uid != testUID || st.Gid != testUID {
				t.Fatalf("%s appears owned by %d:%d, want %d", p, st.Uid, st.Gid, testUID)
			}
			n++
			return nil
		})
		if n != 1+40+40*50+1 {
			t.Fatalf("walked %d entries", n)
		}
		if names := treeOf(t, m.Upper); len(names) != 0 {
			t.Fatalf("upper holds %d entries before any write", len(names))
		}
	})
	t.Run("WriteCopiesUpOneFile", func(t *testing.T) {
		asUID(t, testUID, m.Merged, "echo changed >> d07/f13 && touch d08/f01 && echo new > d09/new")
		got := treeOf(t, m.Upper)
		want := []string{"d07", "d07/f13", "d08", "d08/f01", "d09", "d09/new"}
		if !slices.Equal(got, want) {
			t.Fatalf("upper holds %v, want %v", got, want)
		}
		if uid, _, _ := ownerOf(t, filepath.Join(m.Upper, "d07/f13")); uid != testUID {
			t.Fatalf("copied-up file owned by %d on disk", uid)
		}
		if hashTree(t, lower) != before {
			t.Fatal("a write through the overlay changed the cached tree")
		}
		if uid, _, _ := ownerOf(t, filepath.Join(lower, "d07/f13")); uid != 0 {
			t.Fatalf("cached file owned by %d on disk, want 0", uid)
		}
		// The clone is read-only: nothing reaches the shared tree through it.
		if err := os.WriteFile(filepath.Join(leaseDir, "lower", "d00", "x"), nil, 0o644); !errors.Is(err, unix.EROFS) {
			t.Fatalf("write into the clone: %v, want EROFS", err)
		}
	})
	t.Run("Checkpoint", func(t *testing.T) {
		res := checkEquivalent(t, repo, m, base, baseRes, nil)
		if res.Stats.Files != 3 {
			t.Fatalf("checkpoint read %d upper files, want 3", res.Stats.Files)
		}
	})
	t.Run("MountAgain", func(t *testing.T) {
		m2, err := hostcache.Mount(ctx, lower, leaseDir, opts)
		must(t, err)
		if !m2.IDMapped || m2.Merged != m.Merged {
			t.Fatalf("re-mount: %+v", m2)
		}
		if mounts, _ := hostcache.OverlayMounts(leaseDir); len(mounts) != 2 {
			t.Fatalf("mounts %v, want the overlay and its lower", mounts)
		}
		_, err = hostcache.Mount(ctx, lower, leaseDir, hostcache.MountOptions{IDMapUID: testUID + 1})
		if bothy.ErrorCode(err) != bothy.ECONFLICT {
			t.Fatalf("mount with another uid: %v, want %s", err, bothy.ECONFLICT)
		}
	})
	t.Run("EvictKeepsTree", func(t *testing.T) {
		c.MinAge = time.Nanosecond
		old := time.Now().Add(-time.Hour)
		must(t, os.Chtimes(lower+".used", old, old))
		res, err := c.Evict(ctx, nil, 0)
		must(t, err)
		if res.InUse != 1 || res.Evicted != 0 {
			t.Fatalf("evict %+v, want the tree in use", res)
		}
	})
	t.Run("Remove", func(t *testing.T) {
		must(t, m.Remove(ctx))
		if mounts, _ := hostcache.OverlayMounts(leaseDir); len(mounts) != 0 {
			t.Fatalf("mounts left: %v", mounts)
		}
		if _, err := os.Lstat(leaseDir); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("lease directory left: %v", err)
		}
		if hashTree(t, lower) != before {
			t.Fatal("Remove changed the cached tree")
		}
	})
	t.Run("RecoverClone", func(t *testing.T) {
		// A crash between the clone and the overlay leaves a clone alone;
		// Mount replaces it.
		dir := searchableDir(t)
		m, err := hostcache.Mount(ctx, lower, dir, opts)
		must(t, err)
		t.Cleanup(func() { m.Remove(ctx) })
		must(t, unix.Unmount(m.Merged, 0))
		m, err = hostcache.Mount(ctx, lower, dir, opts)
		must(t, err)
		if mounts, _ := hostcache.OverlayMounts(dir); !m.IDMapped || len(mounts) != 2 {
			t.Fatalf("mounts %v idmapped %v", mounts, m.IDMapped)
		}
	})
}

// TestMount_IDMapFallback mounts over a lower that cannot be idmapped (an
// overlay): Mount falls back to a plain overlay owned by root.
func TestMount_IDMapFallback(t *testing.T) {
	needRoot(t)
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644))
	inner := mount(t, src, hostcache.MountOptions{})
	m := mount(t, inner.Merged, hostcache.MountOptions{IDMapUID: testUID})
	if m.IDMapped || !errors.Is(m.IDMapErr, unix.EINVAL) {
		t.Fatalf("idmapped %v, error %v; want a fallback with EINVAL", m.IDMapped, m.IDMapErr)
	}
	if uid, _, _ := ownerOf(t, m.Merged); uid != 0 {
		t.Fatalf("fallback root owned by %d, want 0", uid)
	}
	if mounts, _ := hostcache.OverlayMounts(filepath.Dir(m.Merged)); len(mounts) != 1 {
		t.Fatalf("mounts %v, want the overlay only", mounts)
	}
	if b, err := os.ReadFile(filepath.Join(m.Merged, "f")); err != nil || string(b) != "x" {
		t.Fatalf("read through the fallback: %q, %v", b, err)
	}
	t.Log(m.IDMapErr)
}

func ownerOf(tb testing.TB, p string) (uid, gid uint32, mode fs.FileMode) {
	tb.Helper()
	fi, err := os.Lstat(p)
	must(tb, err)
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode()
}

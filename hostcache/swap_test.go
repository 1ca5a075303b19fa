package hostcache_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/hostcache"
)

// TestCheckpoint_SwapToSymlink: a lease's processes run while its upper
// layer is scanned (as root). A directory or file swapped for a symlink to
// host files between the scan's stat and its open must not bring those
// files into the tenant's revision.
func TestCheckpoint_SwapToSymlink(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	repo := newRepo(t)
	base, baseRes := snapshotOf(t, repo, t.TempDir())
	c, err := hostcache.Open(t.TempDir())
	must(t, err)
	lower, err := c.Materialize(ctx, tenant, base)
	must(t, err)
	m := mount(t, lower, hostcache.MountOptions{})

	secretDir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(secretDir, "f"), []byte("HOST-SECRET"), 0o600))
	must(t, os.MkdirAll(filepath.Join(m.Merged, "d"), 0o755))
	must(t, os.WriteFile(filepath.Join(m.Merged, "d", "f"), []byte("tenant"), 0o644))
	must(t, os.WriteFile(filepath.Join(m.Merged, "g"), []byte("tenant"), 0o644))

	swapped := map[string]bool{}
	hostcache.SetBeforeOpen(func(dir, name string) {
		if !strings.HasSuffix(dir, "upper") || swapped[name] {
			return
		}
		swapped[name] = true
		p := filepath.Join(dir, name)
		target := secretDir
		if name == "g" {
			target = filepath.Join(secretDir, "f")
		}
		must(t, os.Rename(p, p+".moved"))
		must(t, os.Symlink(target, p))
	})
	defer hostcache.SetBeforeOpen(nil)
	res, err := m.Checkpoint(ctx, base, hostcache.CheckpointOptions{BaseSize: baseRes.Size, BaseFileCount: baseRes.FileCount})
	if err != nil {
		t.Fatal(err)
	}
	if !swapped["d"] || !swapped["g"] {
		t.Fatalf("the hook swapped %v", swapped)
	}
	snap := open(t, repo, res.Root, res.Packs)
	var walk func(h checkpoint.Hash, prefix string)
	walk = func(h checkpoint.Hash, prefix string) {
		tr, err := snap.Tree(ctx, h)
		must(t, err)
		for i := range tr.Entries {
			e := &tr.Entries[i]
			switch e.Type {
			case checkpoint.TypeDir:
				walk(e.Tree, prefix+e.Name+"/")
			case checkpoint.TypeFile:
				rc, err := snap.OpenFile(ctx, e, 0, -1)
				must(t, err)
				b, _ := io.ReadAll(rc)
				rc.Close()
				if bytes.Contains(b, []byte("HOST-SECRET")) {
					t.Fatalf("the revision holds a host file's content at %s%s", prefix, e.Name)
				}
			}
		}
	}
	walk(res.Root, "")
}

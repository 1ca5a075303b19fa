package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/localblob"
)

// snapshotOf checkpoints dir and opens the result.
func snapshotOf(t *testing.T, dir string) *checkpoint.Snapshot {
	t.Helper()
	ctx := context.Background()
	blobs, err := localblob.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo, err := checkpoint.NewRepo(blobs, "t1", make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	res, err := repo.Checkpoint(ctx, dir, nil, checkpoint.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := repo.Open(ctx, res.Root.String(), res.Packs)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestApplyChange_Confined: a change is applied through an os.Root, so a
// symlink that a sandboxed process put on the disk cannot lead the
// agent's write (made as root on the host) outside the workspace.
func TestApplyChange_Confined(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "link"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "link", "f"), []byte("payload"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "top"), []byte("top"), 0o600); err != nil {
		t.Fatal(err)
	}
	snap := snapshotOf(t, src)

	ws, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := applyChange(ctx, root, snap, "link/f", -1); err == nil {
		t.Fatal("a write through a symlink that leaves the workspace succeeded")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the write landed outside: %v", ents)
	}

	// In diff order the symlink itself is replaced first, then the file is
	// written inside; a plain file gets its content and mode.
	for _, p := range []string{"link", "link/f", "top"} {
		if err := applyChange(ctx, root, snap, p, -1); err != nil {
			t.Fatalf("apply %s: %v", p, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ws, "link", "f")); err != nil || string(b) != "payload" {
		t.Fatalf("link/f = %q, %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "link")); err != nil || !fi.IsDir() {
		t.Fatalf("link is %v, %v; want a directory", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(ws, "top")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("top: %v, %v", fi, err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("something landed outside: %v", ents)
	}
	// A path the snapshot does not hold is removed.
	if err := os.WriteFile(filepath.Join(ws, "stale"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := applyChange(ctx, root, snap, "stale", -1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "stale")); !os.IsNotExist(err) {
		t.Fatalf("stale still there: %v", err)
	}
}

package hostcache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/mountinfo"
)

// Workspace is a lease's materialized workspace: an Overlay (the default,
// which needs root) or a Copy (which needs no privilege).
type Workspace interface {
	// Path is the directory a provider binds as /workspace.
	Path() string
	// Checkpoint stores the workspace as a new root on top of base, the
	// snapshot it was materialized from (see Overlay.Checkpoint).
	Checkpoint(ctx context.Context, base *checkpoint.Snapshot, opts CheckpointOptions) (*Result, error)
	// WrittenBytes is the disk the lease's writes take, which the scratch
	// limit bounds.
	WrittenBytes() int64
	// Remove deletes the workspace and everything of it under its lease
	// directory; it is idempotent.
	Remove(ctx context.Context) error
}

var (
	_ Workspace = (*Overlay)(nil)
	_ Workspace = (*Copy)(nil)
)

// Mode is how an agent materializes the workspaces of its leases.
type Mode string

const (
	// ModeOverlay mounts an overlay of the cached base revision and a
	// per-lease writable layer (Mount). It needs root.
	ModeOverlay Mode = "overlay"
	// ModeCopy restores the base revision into a plain directory of the
	// lease (CopyIn). It needs no privilege, and is meant for providers
	// that run commands as the agent's own user (process).
	ModeCopy Mode = "copy"
)

// ParseMode returns the mode named s; "" is ModeOverlay.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return ModeOverlay, nil
	case ModeOverlay, ModeCopy:
		return m, nil
	}
	return "", bothy.Errorf(bothy.EINVALID, "workspace mode %q is neither %q nor %q", s, ModeOverlay, ModeCopy)
}

// Path returns Merged.
func (m *Overlay) Path() string { return m.Merged }

// WrittenBytes is the apparent size of the upper layer (apparentBytes),
// all that the lease wrote, a sparse file by its size.
func (m *Overlay) WrittenBytes() int64 { return apparentBytes(m.Upper) }

// Copy is a lease's workspace as a plain directory, DIR/tree: the base
// revision restored from its packs, then written in place by the lease.
// A checkpoint is a full scan of the tree (Repo.Checkpoint) with a stat
// cache, DIR/statcache, so only files whose stat changed are read. It
// mounts nothing and chowns nothing: the tree belongs to the agent's user.
//
// The scan opens directories by path, not through descriptors as
// Overlay.Checkpoint does, so a process that swaps a directory for a
// symlink while it runs can lead the scan outside the tree: only run in a
// Copy commands that already have the agent's privileges.
type Copy struct {
	// Dir is the lease's workspace directory (LEASEDIR/ws).
	Dir string
	// baseBytes is the apparent size of the restored base
	// (apparentBytes), which WrittenBytes does not count.
	baseBytes int64
}

// CopyIn restores snap into leaseDir/tree and returns the Copy. If the
// tree is already there (a restarted agent taking the lease over), CopyIn
// returns it as it is: the lease's writes survive. A tree whose restore
// was interrupted is restored again.
func CopyIn(ctx context.Context, snap *checkpoint.Snapshot, leaseDir string) (*Copy, error) {
	leaseDir, err := filepath.Abs(leaseDir)
	if err != nil {
		return nil, fmt.Errorf("copy workspace: %w", err)
	}
	c := &Copy{Dir: leaseDir}
	if err := os.MkdirAll(leaseDir, 0o700); err != nil {
		return nil, fmt.Errorf("copy workspace: %w", err)
	}
	if _, err := os.Lstat(c.Path()); err == nil {
		b, _ := os.ReadFile(c.baseBytesFile())
		c.baseBytes, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return c, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("copy workspace: %w", err)
	}
	tmp := c.Path() + ".tmp"
	removeTree(tmp)
	if err := snap.Restore(ctx, tmp, checkpoint.RestoreOptions{StatCache: c.statCache()}); err != nil {
		removeTree(tmp)
		return nil, fmt.Errorf("copy workspace %s: %w", snap.Root(), err)
	}
	// Restore may leave the root 0700; commands run as the agent's user.
	c.baseBytes = apparentBytes(tmp)
	if err := os.WriteFile(c.baseBytesFile(), []byte(strconv.FormatInt(c.baseBytes, 10)+"\n"), 0o600); err != nil {
		removeTree(tmp)
		return nil, fmt.Errorf("copy workspace: %w", err)
	}
	if err := os.Rename(tmp, c.Path()); err != nil {
		removeTree(tmp)
		return nil, fmt.Errorf("copy workspace: %w", err)
	}
	return c, nil
}

// Path returns DIR/tree.
func (c *Copy) Path() string { return filepath.Join(c.Dir, "tree") }

func (c *Copy) statCache() string     { return filepath.Join(c.Dir, "statcache") }
func (c *Copy) baseBytesFile() string { return filepath.Join(c.Dir, "base.bytes") }

// Checkpoint stores the tree as a new root on top of opts.Parent (nil =
// base) by scanning all of it; files whose stat the stat cache holds are
// not read again. Result.Packs is exactly the packs Root reaches;
// BaseSize and BaseFileCount are not needed, since the scan counts every
// file.
func (c *Copy) Checkpoint(ctx context.Context, base *checkpoint.Snapshot, opts CheckpointOptions) (*Result, error) {
	parent, err := opts.parent(base)
	if err != nil {
		return nil, err
	}
	res, err := parent.Repo().Checkpoint(ctx, c.Path(), parent, checkpoint.CheckpointOptions{StatCache: c.statCache()})
	if err != nil {
		return nil, err
	}
	return &Result{Root: res.Root, Packs: res.Packs, Size: res.Size, FileCount: res.FileCount, Stats: Stats{Stats: res.Stats}}, nil
}

// WrittenBytes is the apparent size of the tree (apparentBytes, a sparse
// file by its size) less that of the restored base, at least 0: what the
// lease added, net of what it deleted of the base (an overlay's upper
// layer counts only what was written).
func (c *Copy) WrittenBytes() int64 { return max(0, apparentBytes(c.Path())-c.baseBytes) }

// Remove deletes DIR and everything in it, read-only directories too. It
// refuses while anything is mounted under DIR, so that it never deletes
// through a mount into what is not the lease's.
func (c *Copy) Remove(ctx context.Context) error {
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return fmt.Errorf("remove copied workspace: %w", err)
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return err
	}
	for _, mi := range mounts {
		if mi.Point == dir || strings.HasPrefix(mi.Point, dir+"/") {
			return fmt.Errorf("remove copied workspace: %s is mounted", mi.Point)
		}
	}
	removeTree(dir)
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("remove copied workspace: %s is still there", dir)
	}
	return nil
}

package control

import (
	"context"
	"io"
	"io/fs"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/workspace"
)

// Files decorates ws, the store's file service (package workspace), into
// the files API of every computer, so that a client never sees two views
// of one workspace (docs/data-path.md, "The files API"):
//
//   - a call on a computer whose lease is ready first checkpoints the
//     lease's disk, so ws reads, and changes, what is on it;
//   - a change ws made is committed to the store while no runtime owns
//     the computer (cold or failed) and otherwise goes down the runtime's
//     apply path (commitThroughRuntime): the runtime applies it to its
//     disk and commits it through its lease.
//
// ws knows nothing of the control plane: it is given the commit step
// (workspace.FS.CommitVia).
func (c *Controller) Files(ws *workspace.FS) bothy.FileService {
	f := &files{c: c}
	f.next = ws.CommitVia(f.commit)
	return f
}

type files struct {
	c    *Controller
	next bothy.FileService
}

var _ bothy.FileService = (*files)(nil)

// sync checkpoints the computer's lease, if it has one that is ready.
func (f *files) sync(ctx context.Context, tenantID, computerID string) error {
	l := f.c.leaseOf(computerID)
	if l == nil {
		return nil
	}
	f.c.mu.Lock()
	ready := l.ready && l.tenantID == tenantID
	f.c.mu.Unlock()
	if !ready {
		return nil
	}
	_, err := f.c.Checkpoint(ctx, tenantID, computerID)
	return err
}

// commit routes the revision of one attempt at a change, by the state of
// the computer that attempt read: to the store when it is cold, else to
// the runtime's apply path.
func (f *files) commit(ctx context.Context, comp *bothy.Computer, req *bothy.CommitRequest) (*bothy.Revision, error) {
	if !workspace.RuntimeOwned(comp) {
		return f.c.store.CommitRevision(ctx, req)
	}
	return f.c.commitThroughRuntime(ctx, comp, req)
}

func (f *files) ReadFile(ctx context.Context, tenantID, computerID, path string, off, length int64) (io.ReadCloser, *bothy.FileInfo, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return nil, nil, err
	}
	return f.next.ReadFile(ctx, tenantID, computerID, path, off, length)
}

func (f *files) Stat(ctx context.Context, tenantID, computerID, path string) (*bothy.FileInfo, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	return f.next.Stat(ctx, tenantID, computerID, path)
}

func (f *files) Lstat(ctx context.Context, tenantID, computerID, path string) (*bothy.FileInfo, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	return f.next.Lstat(ctx, tenantID, computerID, path)
}

func (f *files) ReadDir(ctx context.Context, tenantID, computerID, path string, opts bothy.ReadDirOptions) ([]*bothy.FileInfo, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	return f.next.ReadDir(ctx, tenantID, computerID, path, opts)
}

func (f *files) Glob(ctx context.Context, tenantID, computerID, pattern string, limit int) ([]*bothy.FileInfo, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	return f.next.Glob(ctx, tenantID, computerID, pattern, limit)
}

func (f *files) Grep(ctx context.Context, tenantID, computerID string, opts bothy.GrepOptions) (*bothy.GrepResult, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	return f.next.Grep(ctx, tenantID, computerID, opts)
}

func (f *files) Readlink(ctx context.Context, tenantID, computerID, path string) (string, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return "", err
	}
	return f.next.Readlink(ctx, tenantID, computerID, path)
}

func (f *files) WriteFile(ctx context.Context, tenantID, computerID, path string, r io.Reader, opts bothy.WriteOptions) (*bothy.Revision, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	return f.next.WriteFile(ctx, tenantID, computerID, path, r, opts)
}

func (f *files) Mkdir(ctx context.Context, tenantID, computerID, path string, opts bothy.MkdirOptions) (*bothy.Revision, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	return f.next.Mkdir(ctx, tenantID, computerID, path, opts)
}

func (f *files) Remove(ctx context.Context, tenantID, computerID, path string, opts bothy.RemoveOptions) (*bothy.Revision, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	return f.next.Remove(ctx, tenantID, computerID, path, opts)
}

func (f *files) Rename(ctx context.Context, tenantID, computerID, from, to string) (*bothy.Revision, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	return f.next.Rename(ctx, tenantID, computerID, from, to)
}

func (f *files) Symlink(ctx context.Context, tenantID, computerID, target, path string) (*bothy.Revision, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	return f.next.Symlink(ctx, tenantID, computerID, target, path)
}

func (f *files) Chmod(ctx context.Context, tenantID, computerID, path string, mode fs.FileMode) (*bothy.Revision, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	return f.next.Chmod(ctx, tenantID, computerID, path, mode)
}

func (f *files) Apply(ctx context.Context, tenantID, computerID string, ops []bothy.FileOp) (*bothy.Revision, error) {
	if err := f.sync(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	return f.next.Apply(ctx, tenantID, computerID, ops)
}

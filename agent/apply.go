package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/runtime"
)

// applyNow applies a change made through the files API to the lease's
// disk and commits it (runtime.ApplyWork), then answers Applied.
func (l *lease) applyNow(ctx context.Context, w *runtime.ApplyWork) {
	rev, err := l.apply(ctx, w)
	req := &runtime.AppliedRequest{ID: w.ID, Revision: rev}
	if err != nil {
		l.a.log.Warn("apply a files-API change", "lease", l.rec.LeaseID, "err", err)
		var be *bothy.Error
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			be = bothy.Errorf(bothy.EINSUFFICIENT, "the computer's disk is full")
		} else if !errors.As(err, &be) {
			be = &bothy.Error{Code: bothy.EINTERNAL, Message: err.Error()}
		}
		req.Error = be
	}
	if err := l.a.cfg.Control.Applied(ctx, l.cred(), req); err != nil {
		l.a.log.Warn("report applied change", "lease", l.rec.LeaseID, "err", err)
	}
	l.mu.Lock()
	delete(l.applying, w.ID)
	l.mu.Unlock()
}

func (l *lease) apply(ctx context.Context, w *runtime.ApplyWork) (int64, error) {
	l.ckptMu.Lock()
	defer l.ckptMu.Unlock()
	l.mu.Lock()
	ws, repo, rev := l.ws, l.repo, l.revision
	l.mu.Unlock()
	if ws == nil {
		return 0, bothy.Errorf(bothy.ECONFLICT, "the lease has no workspace yet")
	} else if rev != w.Base {
		return 0, bothy.Errorf(bothy.ECONFLICT, "the workspace is at revision %d, not %d", rev, w.Base)
	}
	from, err := repo.Open(ctx, w.BaseRoot, w.BasePacks)
	if err != nil {
		return 0, err
	}
	to, err := repo.Open(ctx, w.Root, w.Packs)
	if err != nil {
		return 0, err
	}
	changes, err := checkpoint.Diff(ctx, from, to)
	if err != nil {
		return 0, err
	}
	uid := -1
	if owner, ok := l.a.cfg.Providers[l.rec.Provider].(bothy.WorkspaceOwner); ok {
		if uid, err = owner.WorkspaceUID(ctx, l.rec.LeaseID); err != nil {
			return 0, err
		}
	}
	root, err := os.OpenRoot(ws.Path())
	if err != nil {
		return 0, err
	}
	defer root.Close()
	for _, ch := range changes {
		if err := applyChange(ctx, root, to, ch.Path, uid); err != nil {
			return 0, fmt.Errorf("apply %s: %w", ch.Path, err)
		}
	}
	rev, _, err = l.checkpointLocked(ctx)
	return rev, err
}

// applyChange makes path in root what it is in snap (or absent), through
// root, so that no symlink on the disk leads the write outside it, and
// gives what it creates to uid (if not -1).
func applyChange(ctx context.Context, root *os.Root, snap *checkpoint.Snapshot, p string, uid int) error {
	e, err := lookup(ctx, snap, p)
	if err != nil {
		return err
	}
	fi, lerr := root.Lstat(p)
	exists := lerr == nil
	if e == nil {
		if err := root.RemoveAll(p); err != nil && !gone(err) {
			return err
		}
		return nil
	}
	switch e.Type {
	case checkpoint.TypeDir:
		if exists && !fi.IsDir() {
			if err := root.RemoveAll(p); err != nil {
				return err
			}
			exists = false
		}
		if !exists {
			if err := root.Mkdir(p, e.Mode); err != nil {
				return err
			}
		}
		if err := root.Chmod(p, e.Mode); err != nil {
			return err
		}
	case checkpoint.TypeSymlink:
		if exists {
			if err := root.RemoveAll(p); err != nil {
				return err
			}
		}
		if err := root.Symlink(e.Target, p); err != nil {
			return err
		}
	case checkpoint.TypeFile:
		if exists && fi.IsDir() {
			if err := root.RemoveAll(p); err != nil {
				return err
			}
		}
		tmp := path.Join(path.Dir(p), fmt.Sprintf(".bothy-apply-%d", time.Now().UnixNano()))
		f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, e.Mode)
		if err != nil {
			return err
		}
		rc, err := snap.OpenFile(ctx, e, 0, -1)
		if err == nil {
			_, err = io.Copy(f, rc)
			rc.Close()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = root.Chmod(tmp, e.Mode)
		}
		if err == nil && uid >= 0 {
			err = root.Lchown(tmp, uid, uid)
		}
		if err == nil {
			mt := time.Unix(0, e.ModTime)
			err = root.Chtimes(tmp, mt, mt)
		}
		if err == nil {
			err = root.Rename(tmp, p)
		}
		if err != nil {
			root.Remove(tmp)
			return err
		}
		return nil
	}
	if uid >= 0 {
		return root.Lchown(p, uid, uid)
	}
	return nil
}

// lookup finds path's entry in snap, or nil if it has none.
func lookup(ctx context.Context, snap *checkpoint.Snapshot, p string) (*checkpoint.Entry, error) {
	h := snap.Root()
	var e *checkpoint.Entry
	for _, name := range strings.Split(p, "/") {
		if e != nil && e.Type != checkpoint.TypeDir {
			return nil, nil
		}
		t, err := snap.Tree(ctx, h)
		if err != nil {
			return nil, err
		}
		found, ok := t.Find(name)
		if !ok {
			return nil, nil
		}
		e, h = found, found.Tree
	}
	return e, nil
}

// gone reports an error that means the path is not there (any more).
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

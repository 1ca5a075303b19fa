package workspace

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
)

// WriteFile creates or replaces the file at p with the content of r and
// commits one revision. See bothy.FileService.
func (f *FS) WriteFile(ctx context.Context, tenantID, computerID, p string, r io.Reader, opts bothy.WriteOptions) (*bothy.Revision, error) {
	p, err := f.clean(p)
	if err != nil {
		return nil, err
	}
	c := &content{r: r, max: f.opts.MaxFileSize}
	return f.mutate(ctx, tenantID, computerID, bothy.FileOpWrite, func(ctx context.Context, t *txn) error {
		return t.writeFile(ctx, p, c, opts)
	})
}

// Mkdir creates the directory p and commits one revision.
func (f *FS) Mkdir(ctx context.Context, tenantID, computerID, p string, opts bothy.MkdirOptions) (*bothy.Revision, error) {
	p, err := f.clean(p)
	if err != nil {
		return nil, err
	}
	return f.mutate(ctx, tenantID, computerID, bothy.FileOpMkdir, func(ctx context.Context, t *txn) error {
		return t.mkdir(ctx, p, opts)
	})
}

// Remove removes p and commits one revision.
func (f *FS) Remove(ctx context.Context, tenantID, computerID, p string, opts bothy.RemoveOptions) (*bothy.Revision, error) {
	p, err := f.clean(p)
	if err != nil {
		return nil, err
	}
	return f.mutate(ctx, tenantID, computerID, bothy.FileOpRemove, func(ctx context.Context, t *txn) error {
		return t.remove(ctx, p, opts)
	})
}

// Rename moves from to to, like rename(2), and commits one revision.
func (f *FS) Rename(ctx context.Context, tenantID, computerID, from, to string) (*bothy.Revision, error) {
	from, err := f.clean(from)
	if err != nil {
		return nil, err
	}
	if to, err = f.clean(to); err != nil {
		return nil, err
	}
	return f.mutate(ctx, tenantID, computerID, bothy.FileOpRename, func(ctx context.Context, t *txn) error {
		return t.rename(ctx, from, to)
	})
}

// Symlink creates a symlink at p holding target and commits one revision.
func (f *FS) Symlink(ctx context.Context, tenantID, computerID, target, p string) (*bothy.Revision, error) {
	p, err := f.clean(p)
	if err != nil {
		return nil, err
	} else if err := f.validTarget(target); err != nil {
		return nil, err
	}
	return f.mutate(ctx, tenantID, computerID, bothy.FileOpSymlink, func(ctx context.Context, t *txn) error {
		return t.symlink(ctx, target, p)
	})
}

// Chmod sets the permission bits of p and commits one revision.
func (f *FS) Chmod(ctx context.Context, tenantID, computerID, p string, mode fs.FileMode) (*bothy.Revision, error) {
	p, err := f.clean(p)
	if err != nil {
		return nil, err
	}
	return f.mutate(ctx, tenantID, computerID, bothy.FileOpChmod, func(ctx context.Context, t *txn) error {
		return t.chmod(ctx, p, mode)
	})
}

// Apply runs ops in order and commits them as one revision, or nothing.
func (f *FS) Apply(ctx context.Context, tenantID, computerID string, ops []bothy.FileOp) (*bothy.Revision, error) {
	if len(ops) == 0 {
		return nil, bothy.Errorf(bothy.EINVALID, "batch has no operations")
	} else if len(ops) > f.opts.MaxBatch {
		return nil, bothy.Errorf(bothy.ETOOLARGE, "batch has %d operations, over the limit of %d", len(ops), f.opts.MaxBatch)
	}
	// Check every op before touching the store, and clean its paths once.
	ops = slices.Clone(ops)
	contents := make([]*content, len(ops))
	for i := range ops {
		op := &ops[i]
		err := f.checkOp(op)
		if err == nil && op.Op == bothy.FileOpWrite {
			contents[i] = &content{r: bytes.NewReader(op.Data), max: f.opts.MaxFileSize}
		}
		if err != nil {
			return nil, opError(i, op, err)
		}
	}
	return f.mutate(ctx, tenantID, computerID, "apply", func(ctx context.Context, t *txn) error {
		for i := range ops {
			if err := t.apply(ctx, &ops[i], contents[i]); err != nil {
				return opError(i, &ops[i], err)
			}
		}
		return nil
	})
}

// checkOp validates op and replaces its paths by their clean forms.
func (f *FS) checkOp(op *bothy.FileOp) error {
	var err error
	if op.Path, err = f.clean(op.Path); err != nil {
		return err
	}
	switch op.Op {
	case bothy.FileOpWrite:
		if int64(len(op.Data)) > f.opts.MaxFileSize {
			return errTooLarge(f.opts.MaxFileSize)
		}
	case bothy.FileOpRename:
		op.To, err = f.clean(op.To)
	case bothy.FileOpSymlink:
		err = f.validTarget(op.Target)
	case bothy.FileOpMkdir, bothy.FileOpRemove, bothy.FileOpChmod:
	default:
		err = bothy.Errorf(bothy.EINVALID, "unknown file operation %q", op.Op)
	}
	return err
}

// apply runs one checked op.
func (t *txn) apply(ctx context.Context, op *bothy.FileOp, c *content) error {
	switch op.Op {
	case bothy.FileOpWrite:
		return t.writeFile(ctx, op.Path, c, bothy.WriteOptions{Mode: op.Mode, Exclusive: op.Exclusive, MkdirParents: op.Parents})
	case bothy.FileOpMkdir:
		return t.mkdir(ctx, op.Path, bothy.MkdirOptions{Mode: op.Mode, Parents: op.Parents})
	case bothy.FileOpRemove:
		return t.remove(ctx, op.Path, bothy.RemoveOptions{Recursive: op.Recursive, Force: op.Force})
	case bothy.FileOpRename:
		return t.rename(ctx, op.Path, op.To)
	case bothy.FileOpSymlink:
		return t.symlink(ctx, op.Target, op.Path)
	case bothy.FileOpChmod:
		return t.chmod(ctx, op.Path, op.Mode)
	}
	return bothy.Errorf(bothy.EINVALID, "unknown file operation %q", op.Op)
}

// opError names the failing op of a batch, keeping the error's code.
func opError(i int, op *bothy.FileOp, err error) error {
	if code := bothy.ErrorCode(err); code != bothy.EINTERNAL {
		return bothy.Errorf(code, "op %d (%s): %s", i, op.Op, bothy.ErrorMessage(err))
	}
	return fmt.Errorf("op %d (%s): %w", i, op.Op, err)
}

// validTarget checks a symlink target, which is otherwise stored verbatim.
func (f *FS) validTarget(target string) error {
	if target == "" {
		return bothy.Errorf(bothy.EINVALID, "symlink target is empty")
	} else if strings.IndexByte(target, 0) >= 0 {
		return bothy.Errorf(bothy.EINVALID, "symlink target holds a NUL byte")
	} else if len(target) > f.opts.MaxPath {
		return bothy.Errorf(bothy.EINVALID, "symlink target is over %d bytes", f.opts.MaxPath)
	}
	return nil
}

func (t *txn) writeFile(ctx context.Context, p string, c *content, opts bothy.WriteOptions) error {
	if opts.Exclusive {
		// Like O_CREAT|O_EXCL: even a dangling symlink counts as existing.
		l, err := t.resolve(ctx, p, false, opts.MkdirParents)
		if err != nil {
			return err
		} else if l.root() || l.entry() != nil {
			return bothy.Errorf(bothy.ECONFLICT, "%q exists", p)
		}
	}
	l, err := t.resolve(ctx, p, true, opts.MkdirParents)
	if err != nil {
		return err
	} else if l.root() {
		return bothy.Errorf(bothy.EISDIR, "%q is a directory", p)
	}
	mode := fs.FileMode(0o644)
	if i, ok := l.parent.find(l.name); ok {
		e := &l.parent.entries[i]
		if e.Type == checkpoint.TypeDir {
			return bothy.Errorf(bothy.EISDIR, "%q is a directory", p)
		}
		mode = e.Mode
		if err := t.account(ctx, l.parent, i, -1); err != nil {
			return err
		}
	}
	if opts.Mode != 0 {
		mode = opts.Mode
	}
	chunks, size, err := c.write(ctx, t.w)
	if err != nil {
		return err
	}
	l.parent.put(checkpoint.Entry{
		Name:    l.name,
		Type:    checkpoint.TypeFile,
		Mode:    mode & fs.ModePerm,
		Size:    size,
		ModTime: t.now,
		Chunks:  chunks,
	}, nil)
	t.sizeDelta += size
	t.filesDelta++
	return nil
}

func (t *txn) mkdir(ctx context.Context, p string, opts bothy.MkdirOptions) error {
	l, err := t.resolve(ctx, p, false, opts.Parents)
	if err != nil {
		return err
	} else if l.root() {
		if opts.Parents {
			return nil
		}
		return bothy.Errorf(bothy.ECONFLICT, "%q exists", p)
	}
	e := l.entry()
	switch {
	case e == nil:
		mode := opts.Mode & fs.ModePerm
		if mode == 0 {
			mode = 0o755
		}
		kid := newDir(checkpoint.Hash{}, nil)
		kid.dirty = true
		l.parent.put(checkpoint.Entry{Name: l.name, Type: checkpoint.TypeDir, Mode: mode}, kid)
		return nil
	case !opts.Parents:
		return bothy.Errorf(bothy.ECONFLICT, "%q exists", p)
	case e.Type == checkpoint.TypeDir:
		return nil
	case e.Type == checkpoint.TypeSymlink:
		// mkdir -p accepts a symlink to a directory.
		l, err := t.resolve(ctx, p, true, false)
		if err != nil {
			return err
		} else if l.root() {
			return nil
		} else if e := l.entry(); e != nil && e.Type == checkpoint.TypeDir {
			return nil
		}
	}
	return bothy.Errorf(bothy.ENOTDIR, "%q exists and is not a directory", p)
}

func (t *txn) remove(ctx context.Context, p string, opts bothy.RemoveOptions) error {
	l, err := t.resolve(ctx, p, false, false)
	if err != nil {
		if opts.Force && bothy.ErrorCode(err) == bothy.ENOTFOUND {
			return nil
		}
		return err
	} else if l.root() {
		return bothy.Errorf(bothy.EINVALID, "cannot remove the workspace root")
	}
	i, ok := l.parent.find(l.name)
	if !ok {
		if opts.Force {
			return nil
		}
		return bothy.Errorf(bothy.ENOTFOUND, "%q does not exist", p)
	}
	if l.parent.entries[i].Type == checkpoint.TypeDir && !opts.Recursive {
		k, err := t.child(ctx, l.parent, i)
		if err != nil {
			return err
		} else if len(k.entries) > 0 {
			return bothy.Errorf(bothy.ENOTEMPTY, "directory %q is not empty", p)
		}
	}
	if err := t.account(ctx, l.parent, i, -1); err != nil {
		return err
	}
	l.parent.del(l.name)
	return nil
}

func (t *txn) rename(ctx context.Context, from, to string) error {
	src, err := t.resolve(ctx, from, false, false)
	if err != nil {
		return err
	} else if src.root() {
		return bothy.Errorf(bothy.EINVALID, "cannot rename the workspace root")
	}
	si, ok := src.parent.find(src.name)
	if !ok {
		return bothy.Errorf(bothy.ENOTFOUND, "%q does not exist", from)
	}
	var srcDir *dir
	if src.parent.entries[si].Type == checkpoint.TypeDir {
		if srcDir, err = t.child(ctx, src.parent, si); err != nil {
			return err
		}
	}
	dst, err := t.resolve(ctx, to, false, false)
	if err != nil {
		return err
	} else if dst.root() {
		return bothy.Errorf(bothy.EINVALID, "cannot replace the workspace root")
	} else if dst.parent == src.parent && dst.name == src.name {
		return nil
	} else if srcDir != nil && slices.Contains(dst.dirs, srcDir) {
		return bothy.Errorf(bothy.EINVALID, "cannot move directory %q into itself", from)
	}
	if di, ok := dst.parent.find(dst.name); ok {
		de := &dst.parent.entries[di]
		switch {
		case de.Type == checkpoint.TypeDir && srcDir == nil:
			return bothy.Errorf(bothy.EISDIR, "%q is a directory", to)
		case de.Type == checkpoint.TypeDir:
			k, err := t.child(ctx, dst.parent, di)
			if err != nil {
				return err
			} else if len(k.entries) > 0 {
				return bothy.Errorf(bothy.ENOTEMPTY, "directory %q is not empty", to)
			}
		case srcDir != nil:
			return bothy.Errorf(bothy.ENOTDIR, "%q is not a directory", to)
		}
		if err := t.account(ctx, dst.parent, di, -1); err != nil {
			return err
		}
	}
	e := src.parent.entries[si]
	src.parent.del(src.name)
	e.Name = dst.name
	dst.parent.put(e, srcDir)
	return nil
}

func (t *txn) symlink(ctx context.Context, target, p string) error {
	l, err := t.resolve(ctx, p, false, false)
	if err != nil {
		return err
	} else if l.root() || l.entry() != nil {
		return bothy.Errorf(bothy.ECONFLICT, "%q exists", p)
	}
	l.parent.put(checkpoint.Entry{
		Name:    l.name,
		Type:    checkpoint.TypeSymlink,
		Mode:    0o777,
		Size:    int64(len(target)),
		ModTime: t.now,
		Target:  target,
	}, nil)
	return nil
}

func (t *txn) chmod(ctx context.Context, p string, mode fs.FileMode) error {
	l, err := t.resolve(ctx, p, true, false)
	if err != nil {
		return err
	} else if l.root() {
		return bothy.Errorf(bothy.EINVALID, "cannot chmod the workspace root")
	}
	i, ok := l.parent.find(l.name)
	if !ok {
		return bothy.Errorf(bothy.ENOTFOUND, "%q does not exist", p)
	}
	if e := &l.parent.entries[i]; e.Mode != mode&fs.ModePerm {
		e.Mode = mode & fs.ModePerm
		l.parent.dirty = true
	}
	return nil
}

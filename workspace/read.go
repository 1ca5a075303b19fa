package workspace

import (
	"context"
	"io"
	"strings"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
)

// ReadFile streams length bytes of the file at p from offset off (length
// < 0: to the end), following a final symlink inside the workspace. See
// bothy.FileService.
func (f *FS) ReadFile(ctx context.Context, tenantID, computerID, p string, off, length int64) (io.ReadCloser, *bothy.FileInfo, error) {
	p, err := f.clean(p)
	if err != nil {
		return nil, nil, err
	} else if off < 0 {
		return nil, nil, bothy.Errorf(bothy.EINVALID, "read offset must not be negative")
	}
	t, err := f.read(ctx, tenantID, computerID)
	if err != nil {
		return nil, nil, err
	}
	l, err := t.resolve(ctx, p, true, false)
	if err != nil {
		return nil, nil, err
	} else if l.root() {
		return nil, nil, bothy.Errorf(bothy.EISDIR, "%q is a directory", p)
	}
	e := l.entry()
	if e == nil {
		return nil, nil, bothy.Errorf(bothy.ENOTFOUND, "%q does not exist", p)
	} else if e.Type == checkpoint.TypeDir {
		return nil, nil, bothy.Errorf(bothy.EISDIR, "%q is a directory", p)
	}
	fi := fileInfo(p, e)
	if off >= e.Size || length == 0 {
		return io.NopCloser(strings.NewReader("")), fi, nil
	}
	if length < 0 || length > e.Size-off {
		length = e.Size - off
	}
	rc, err := t.snap.OpenFile(ctx, e, off, length)
	if err != nil {
		return nil, nil, err
	}
	return rc, fi, nil
}

// Stat describes p, following a final symlink inside the workspace.
func (f *FS) Stat(ctx context.Context, tenantID, computerID, p string) (*bothy.FileInfo, error) {
	return f.stat(ctx, tenantID, computerID, p, true)
}

// Lstat describes p; a final symlink is described itself.
func (f *FS) Lstat(ctx context.Context, tenantID, computerID, p string) (*bothy.FileInfo, error) {
	return f.stat(ctx, tenantID, computerID, p, false)
}

func (f *FS) stat(ctx context.Context, tenantID, computerID, p string, follow bool) (*bothy.FileInfo, error) {
	p, err := f.clean(p)
	if err != nil {
		return nil, err
	}
	t, err := f.read(ctx, tenantID, computerID)
	if err != nil {
		return nil, err
	}
	l, err := t.resolve(ctx, p, follow, false)
	if err != nil {
		return nil, err
	} else if l.root() {
		fi := rootInfo()
		fi.Path, fi.Name = p, baseName(p)
		return fi, nil
	}
	e := l.entry()
	if e == nil {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "%q does not exist", p)
	}
	return fileInfo(p, e), nil
}

// Readlink returns the target of the symlink at p.
func (f *FS) Readlink(ctx context.Context, tenantID, computerID, p string) (string, error) {
	fi, err := f.Lstat(ctx, tenantID, computerID, p)
	if err != nil {
		return "", err
	} else if fi.Type != bothy.FileTypeSymlink {
		return "", bothy.Errorf(bothy.EINVALID, "%q is not a symlink", fi.Path)
	}
	return fi.Target, nil
}

// ReadDir lists the directory at p sorted by name, following symlinks
// inside the workspace.
func (f *FS) ReadDir(ctx context.Context, tenantID, computerID, p string, opts bothy.ReadDirOptions) ([]*bothy.FileInfo, error) {
	p, err := f.clean(p)
	if err != nil {
		return nil, err
	} else if opts.Offset < 0 || opts.Limit < 0 {
		return nil, bothy.Errorf(bothy.EINVALID, "read dir offset and limit must not be negative")
	}
	t, err := f.read(ctx, tenantID, computerID)
	if err != nil {
		return nil, err
	}
	l, err := t.resolve(ctx, p, true, false)
	if err != nil {
		return nil, err
	}
	d, err := t.dirAt(ctx, l, p)
	if err != nil {
		return nil, err
	}
	entries := d.entries[min(opts.Offset, len(d.entries)):]
	if opts.Limit > 0 && len(entries) > opts.Limit {
		entries = entries[:opts.Limit]
	}
	out := make([]*bothy.FileInfo, 0, len(entries))
	for i := range entries {
		out = append(out, fileInfo(joinPath(p, entries[i].Name), &entries[i]))
	}
	return out, nil
}

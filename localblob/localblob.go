// Package localblob implements bothy.BlobStore on a local directory. It is
// safe for several processes sharing one directory: a blob appears only
// through link(2) of a complete, synced temporary file, and link fails if the
// key exists, so exactly one concurrent writer creates a key.
package localblob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
)

// tmpDirName is the directory under the root holding files being written.
// '~' is outside the key alphabet, so no key can name it.
const tmpDirName = "~tmp"

// staleAge is how old a temporary file must be before Open removes it as the
// leftover of a crashed writer.
const staleAge = time.Hour

var _ bothy.BlobStore = (*Store)(nil)

// Store is a blob store in a local directory; the blob with key k is the file
// dir/k. Directories are created as keys need them and are never removed, so
// a writer never races a delete of its parent directory.
//
// GetBlob with off at or beyond the end of the blob returns an empty reader,
// as a range read of an empty range.
//
// A key cannot be both a blob and a "directory" of other blobs (both "a" and
// "a/b"): the second PutBlob fails. Content-addressed keys never do this.
type Store struct {
	dir string
	tmp string
}

// Open returns the store rooted at dir, creating dir if needed, and removes
// temporary files left for more than an hour by crashed writers.
func Open(dir string) (*Store, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open blob store: %w", err)
	}
	s := &Store{dir: dir, tmp: filepath.Join(dir, tmpDirName)}
	if err := os.MkdirAll(s.tmp, 0o755); err != nil {
		return nil, fmt.Errorf("open blob store: %w", err)
	}
	if err := s.removeStale(time.Now().Add(-staleAge)); err != nil {
		return nil, fmt.Errorf("open blob store: %w", err)
	}
	return s, nil
}

// Dir returns the store's root directory.
func (s *Store) Dir() string { return s.dir }

// removeStale removes temporary files last written before cutoff. A live
// writer keeps its file's mtime fresh, so only abandoned files are old.
func (s *Store) removeStale(cutoff time.Time) error {
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		return err
	}
	for _, e := range entries {
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		if info.ModTime().Before(cutoff) {
			if err := os.Remove(filepath.Join(s.tmp, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

func (s *Store) path(key string) string {
	return filepath.Join(s.dir, filepath.FromSlash(key))
}

// PutBlob implements bothy.BlobWriter.
func (s *Store) PutBlob(ctx context.Context, key string, r io.Reader, size int64) (bool, error) {
	if err := validate(key, "put"); err != nil {
		return false, err
	} else if size < 0 {
		return false, bothy.Errorf(bothy.EINVALID, "put blob %s: negative size %d", key, size)
	}
	created, err := s.put(ctx, key, r, size)
	if err != nil {
		return false, fmt.Errorf("put blob %s: %w", key, diskFull(err))
	}
	return created, nil
}

// errFull is a write that found the store's disk full.
var errFull = bothy.Errorf(bothy.EINSUFFICIENT, "the blob store's disk is full")

// diskFull returns err as EINSUFFICIENT, with err still in its chain, if
// its cause is a full disk or an exhausted quota; other errors unchanged.
func diskFull(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", errFull, err)
	}
	return err
}

func (s *Store) put(ctx context.Context, key string, r io.Reader, size int64) (bool, error) {
	final := s.path(key)
	if exists, err := isBlob(final); err != nil || exists {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}

	f, err := os.CreateTemp(s.tmp, "put-*")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := writeSync(ctx, f, r, size); err != nil {
		return false, err
	}

	if err := s.mkdirs(filepath.Dir(final)); err != nil {
		return false, err
	}
	if err := os.Link(tmp, final); errors.Is(err, fs.ErrExist) {
		// Another writer won. Make sure it is a blob, not a directory.
		if exists, err := isBlob(final); err != nil {
			return false, err
		} else if !exists {
			return false, fmt.Errorf("%s is a directory", key)
		}
		return false, nil
	} else if err != nil {
		return false, err
	}
	if err := syncDir(filepath.Dir(final)); err != nil {
		return false, err
	}
	return true, nil
}

// writeSync copies exactly size bytes from r to f, then syncs and closes f.
func writeSync(ctx context.Context, f *os.File, r io.Reader, size int64) error {
	defer f.Close()
	if err := bothy.CopyBlob(f, ctxReader{ctx, r}, size); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// mkdirs creates dir and its missing parents under the root, syncing each
// parent that gains an entry so the new blob's path survives a crash.
func (s *Store) mkdirs(dir string) error {
	if info, err := os.Stat(dir); err == nil && info.IsDir() {
		return nil
	}
	rel, err := filepath.Rel(s.dir, dir)
	if err != nil {
		return err
	}
	cur := s.dir
	for _, name := range strings.Split(rel, string(filepath.Separator)) {
		parent := cur
		cur = filepath.Join(cur, name)
		if err := os.Mkdir(cur, 0o755); errors.Is(err, fs.ErrExist) {
			continue
		} else if err != nil {
			return err
		}
		if err := syncDir(parent); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return d.Close()
}

// isBlob reports whether a blob exists at path.
func isBlob(path string) (bool, error) {
	info, err := os.Lstat(path)
	if isNotExist(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return info.Mode().IsRegular(), nil
}

// isNotExist reports whether err means a path is missing, including when a
// parent is a file (key "a/b" when "a" is a blob).
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// notExist wraps err so that errors.Is(err, fs.ErrNotExist) holds.
func notExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fmt.Errorf("%w: %w", fs.ErrNotExist, err)
}

func validate(key, op string) error {
	if err := bothy.ValidateBlobKey(key); err != nil {
		return fmt.Errorf("%s blob: %w", op, err)
	}
	return nil
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

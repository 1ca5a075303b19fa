package hostcache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
)

// Overlay's trusted xattrs on upper directories (the mount is made by root
// without userxattr, so they live in the trusted namespace).
const (
	xattrOpaque   = "trusted.overlay.opaque"
	xattrRedirect = "trusted.overlay.redirect"
)

// CheckpointOptions configures Overlay.Checkpoint.
type CheckpointOptions struct {
	// Parent is the lease's latest committed snapshot when it is not the
	// base (the lower layer's root): the upper layer keeps every change of
	// the lease, so each checkpoint rescans it, and writing on top of Parent
	// deduplicates what an earlier checkpoint of the lease already stored.
	// It must belong to the base's repo. nil = base.
	Parent *checkpoint.Snapshot
	// BaseSize and BaseFileCount are the base revision's totals; Result's
	// totals are these plus what the upper layer changes.
	BaseSize, BaseFileCount int64
}

// parent returns Parent, or base when it is nil.
func (o CheckpointOptions) parent(base *checkpoint.Snapshot) (*checkpoint.Snapshot, error) {
	if o.Parent == nil {
		return base, nil
	} else if o.Parent.Repo() != base.Repo() {
		return nil, bothy.Errorf(bothy.EINVALID, "checkpoint: parent snapshot belongs to another repo")
	}
	return o.Parent, nil
}

// Result is the outcome of a checkpoint of a lease: what to commit.
type Result struct {
	Root checkpoint.Hash
	// Packs is the base's packs, Parent's packs and the new ones, sorted. It
	// holds every pack an object of Root is in, and may hold packs that Root
	// no longer reaches (a full Repo.Checkpoint lists exactly the reachable
	// ones); garbage collection keeps those until no revision lists them.
	Packs     []string
	Size      int64 // total bytes of regular files (BaseSize + changes)
	FileCount int64 // regular files (BaseFileCount + changes)
	Stats     Stats
}

// Stats counts what a checkpoint of the upper layer saw and wrote. The
// embedded checkpoint.Stats counts upper-layer entries (Files, Dirs,
// Symlinks, Skipped) and the objects written.
type Stats struct {
	checkpoint.Stats
	Whiteouts  int64 // names deleted from the base
	OpaqueDirs int64 // upper directories that replace the base directory
	Redirects  int64 // renamed lower directories (redirect_dir=on)
}

// Checkpoint stores lower+upper, the merged view, as a new root on top of
// base, the snapshot of the lower layer, by reading only the upper layer:
//
//   - a regular file is new content (a chmod or touch of a lower file
//     copies it up whole, since metacopy is off);
//   - a whiteout (a character device 0:0) deletes the name from the base,
//     and so does any other special file (a full checkpoint skips them);
//   - a symlink is an entry;
//   - a directory merges with the base directory of the same name, unless
//     it is opaque (trusted.overlay.opaque=y: it replaces the base
//     directory's contents) or redirected (trusted.overlay.redirect: its
//     lower contents are the base directory at the redirect path).
//
// Unchanged base subtrees are reused by digest; changed trees are written
// bottom-up. The root equals that of a full Repo.Checkpoint of Merged.
func (m *Overlay) Checkpoint(ctx context.Context, base *checkpoint.Snapshot, opts CheckpointOptions) (*Result, error) {
	parent, err := opts.parent(base)
	if err != nil {
		return nil, err
	}
	s := &scan{base: base, w: parent.NewWriter(), size: opts.BaseSize, files: opts.BaseFileCount}
	root, err := s.run(ctx, m.Upper)
	packs, ferr := s.w.Finish(ctx)
	if err == nil {
		err = ferr
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", m.Upper, err)
	}
	s.st.Stats = mergeStats(s.st.Stats, s.w.Stats())
	packs = append(packs, base.Packs()...)
	slices.Sort(packs)
	return &Result{Root: root, Packs: slices.Compact(packs), Size: s.size, FileCount: s.files, Stats: s.st}, nil
}

// mergeStats adds the writer's object counts to the scan's entry counts.
func mergeStats(scan, w checkpoint.Stats) checkpoint.Stats {
	scan.NewBlobs, scan.NewBlobBytes, scan.NewTrees = w.NewBlobs, w.NewBlobBytes, w.NewTrees
	scan.PacksWritten, scan.PackBytes = w.PacksWritten, w.PackBytes
	return scan
}

type scan struct {
	base        *checkpoint.Snapshot
	w           *checkpoint.Writer
	st          Stats
	size, files int64
	rootEntries []checkpoint.Entry // the base root, for absolute redirects
}

func (s *scan) run(ctx context.Context, upper string) (checkpoint.Hash, error) {
	t, err := s.base.Tree(ctx, s.base.Root())
	if err != nil {
		return checkpoint.Hash{}, fmt.Errorf("read base root: %w", err)
	}
	s.rootEntries = t.Entries
	lower := t.Entries
	// Everything below is reached through directory descriptors opened
	// with O_NOFOLLOW, never by path: processes of the lease keep running
	// while it is scanned, and a directory they swap for a symlink must
	// not lead this root-run scan (and the tenant's revision) to host
	// files.
	root, err := openDirAt(unix.AT_FDCWD, upper)
	if err != nil {
		return checkpoint.Hash{}, err
	}
	defer root.Close()
	if opaque, err := isOpaque(root, upper); err != nil {
		return checkpoint.Hash{}, err
	} else if opaque {
		if err := s.accountAll(ctx, lower, -1); err != nil {
			return checkpoint.Hash{}, err
		}
		lower = nil
	}
	entries, err := s.dir(ctx, root, upper, lower, "", true)
	if err != nil {
		return checkpoint.Hash{}, err
	}
	return s.w.WriteTree(ctx, &checkpoint.Tree{Entries: entries})
}

// dir merges the upper directory upper with lower, the entries of its
// lower directory, found at lowerPath ("" = the root; hasLower false when
// it has none), and returns the merged entries.
func (s *scan) dir(ctx context.Context, d *os.File, upper string, lower []checkpoint.Entry, lowerPath string, hasLower bool) ([]checkpoint.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	dfd := int(d.Fd())
	sort.Strings(names)
	out := slices.Clone(lower)
	for _, name := range names {
		p := upper + "/" + name
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed while we scan
			}
			return nil, &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		if beforeOpen != nil {
			beforeOpen(d, name)
		}
		old := find(lower, name)
		perm := fs.FileMode(st.Mode & 0o777)
		var e checkpoint.Entry
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			s.st.Files++
			e = checkpoint.Entry{Name: name, Type: checkpoint.TypeFile, Mode: perm, ModTime: st.Mtim.Nano()}
			if e.Chunks, e.Size, err = s.writeFile(ctx, dfd, p, name); errors.Is(err, errChanged) {
				continue // replaced while we scan
			} else if err != nil {
				return nil, err
			}
			if err := s.account(ctx, old, -1); err != nil {
				return nil, err
			}
			s.size += e.Size
			s.files++
		case unix.S_IFLNK:
			target, err := readlinkat(dfd, name)
			if errors.Is(err, errChanged) {
				continue
			} else if err != nil {
				return nil, &fs.PathError{Op: "readlink", Path: p, Err: err}
			}
			if err := s.account(ctx, old, -1); err != nil {
				return nil, err
			}
			if target == "" || len(target) > checkpoint.MaxTargetLen {
				s.st.Skipped++
				out = remove(out, name)
				continue
			}
			s.st.Symlinks++
			e = checkpoint.Entry{Name: name, Type: checkpoint.TypeSymlink, Mode: perm, ModTime: st.Mtim.Nano(),
				Size: int64(len(target)), Target: target}
		case unix.S_IFDIR:
			s.st.Dirs++
			sub, err := openDirAt(dfd, name)
			if errors.Is(err, errChanged) {
				continue
			} else if err != nil {
				return nil, err
			}
			e, err = s.subdir(ctx, sub, p, name, perm, old, lowerPath, hasLower)
			sub.Close()
			if err != nil {
				return nil, err
			}
		default:
			// A whiteout (char 0:0) deletes the name; a full checkpoint
			// skips other special files, so they hide the base entry too.
			if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
				s.st.Whiteouts++
			} else {
				s.st.Skipped++
			}
			if err := s.account(ctx, old, -1); err != nil {
				return nil, err
			}
			out = remove(out, name)
			continue
		}
		out = put(out, e)
	}
	return out, nil
}

// subdir merges the upper directory p, called name, whose same-name base
// entry is old (nil if none), and returns its entry.
func (s *scan) subdir(ctx context.Context, d *os.File, p, name string, perm fs.FileMode, old *checkpoint.Entry, lowerPath string, hasLower bool) (checkpoint.Entry, error) {
	opaque, err := isOpaque(d, p)
	if err != nil {
		return checkpoint.Entry{}, err
	}
	redirect, err := getxattr(d, p, xattrRedirect)
	if err != nil {
		return checkpoint.Entry{}, err
	}
	// Where this directory's lower contents are, and which base entry that is.
	childPath, childHas := lowerPath+"/"+name, hasLower
	var lowerEntry *checkpoint.Entry
	switch {
	case redirect != "":
		s.st.Redirects++
		if strings.HasPrefix(redirect, "/") {
			childPath, childHas = strings.TrimRight(redirect, "/"), true
		} else {
			childPath = lowerPath + "/" + redirect
		}
		if childHas {
			if lowerEntry, err = s.resolve(ctx, childPath); err != nil {
				return checkpoint.Entry{}, err
			}
		}
	case hasLower:
		lowerEntry = old
	}
	if opaque {
		s.st.OpaqueDirs++
		lowerEntry, childHas = nil, false
	}
	if lowerEntry != nil && lowerEntry.Type != checkpoint.TypeDir {
		lowerEntry, childHas = nil, false // overlay ignores a non-directory below a directory
	}
	var childLower []checkpoint.Entry
	if lowerEntry != nil {
		t, err := s.base.Tree(ctx, lowerEntry.Tree)
		if err != nil {
			return checkpoint.Entry{}, fmt.Errorf("read base tree %s: %w", lowerEntry.Tree, err)
		}
		childLower = t.Entries
	}
	// A plain merge keeps the base directory's totals; otherwise the old
	// entry goes and the lower directory's contents come.
	if lowerEntry != old {
		if err := s.account(ctx, old, -1); err != nil {
			return checkpoint.Entry{}, err
		}
		if err := s.accountAll(ctx, childLower, 1); err != nil {
			return checkpoint.Entry{}, err
		}
	}
	entries, err := s.dir(ctx, d, p, childLower, childPath, childHas && lowerEntry != nil)
	if err != nil {
		return checkpoint.Entry{}, err
	}
	h, err := s.w.WriteTree(ctx, &checkpoint.Tree{Entries: entries})
	if err != nil {
		return checkpoint.Entry{}, fmt.Errorf("write tree %s: %w", p, err)
	}
	return checkpoint.Entry{Name: name, Type: checkpoint.TypeDir, Mode: perm, Tree: h}, nil
}

// resolve returns the base entry at the slash path p (from the root), or
// nil when some element is missing or not a directory.
func (s *scan) resolve(ctx context.Context, p string) (*checkpoint.Entry, error) {
	entries := s.rootEntries
	var e *checkpoint.Entry
	for _, name := range strings.Split(strings.Trim(p, "/"), "/") {
		if name == "" {
			continue
		}
		if e != nil {
			if e.Type != checkpoint.TypeDir {
				return nil, nil
			}
			t, err := s.base.Tree(ctx, e.Tree)
			if err != nil {
				return nil, fmt.Errorf("read base tree %s: %w", e.Tree, err)
			}
			entries = t.Entries
		}
		if e = find(entries, name); e == nil {
			return nil, nil
		}
	}
	return e, nil
}

// writeFile stores the content of the upper file name in the directory
// dfd (p is its path, for messages). A name that is no longer a regular
// file is errChanged.
func (s *scan) writeFile(ctx context.Context, dfd int, p, name string) ([]checkpoint.Chunk, int64, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if changed(err) {
			return nil, 0, errChanged
		}
		return nil, 0, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, 0, &fs.PathError{Op: "fstat", Path: p, Err: err}
	} else if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, 0, errChanged // a FIFO or device swapped in: never read it
	}
	chunks, size, err := s.w.WriteFile(ctx, f)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", p, err)
	}
	s.st.FilesRead++
	s.st.BytesRead += size
	return chunks, size, nil
}

// account adds (sign 1) or removes (sign -1) a base entry, and for a
// directory everything below it, from the totals.
func (s *scan) account(ctx context.Context, e *checkpoint.Entry, sign int64) error {
	if e == nil {
		return nil
	}
	switch e.Type {
	case checkpoint.TypeFile:
		s.size += sign * e.Size
		s.files += sign
	case checkpoint.TypeDir:
		t, err := s.base.Tree(ctx, e.Tree)
		if err != nil {
			return fmt.Errorf("read base tree %s: %w", e.Tree, err)
		}
		return s.accountAll(ctx, t.Entries, sign)
	}
	return nil
}

func (s *scan) accountAll(ctx context.Context, entries []checkpoint.Entry, sign int64) error {
	for i := range entries {
		if err := s.account(ctx, &entries[i], sign); err != nil {
			return err
		}
	}
	return nil
}

// find returns the entry called name in sorted entries, or nil.
func find(entries []checkpoint.Entry, name string) *checkpoint.Entry {
	i, ok := slices.BinarySearchFunc(entries, name, func(e checkpoint.Entry, n string) int { return strings.Compare(e.Name, n) })
	if !ok {
		return nil
	}
	return &entries[i]
}

// put adds or replaces e in sorted entries.
func put(entries []checkpoint.Entry, e checkpoint.Entry) []checkpoint.Entry {
	i, ok := slices.BinarySearchFunc(entries, e.Name, func(e checkpoint.Entry, n string) int { return strings.Compare(e.Name, n) })
	if ok {
		entries[i] = e
		return entries
	}
	return slices.Insert(entries, i, e)
}

// remove deletes the entry called name from sorted entries.
func remove(entries []checkpoint.Entry, name string) []checkpoint.Entry {
	i, ok := slices.BinarySearchFunc(entries, name, func(e checkpoint.Entry, n string) int { return strings.Compare(e.Name, n) })
	if ok {
		return slices.Delete(entries, i, i+1)
	}
	return entries
}

// isOpaque reports whether the upper directory p hides its lower contents.
func isOpaque(d *os.File, p string) (bool, error) {
	v, err := getxattr(d, p, xattrOpaque)
	return v == "y", err
}

// getxattr returns the value of xattr name on the open directory d (p is
// its path, for messages), "" when it is not set.
func getxattr(d *os.File, p, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Fgetxattr(int(d.Fd()), name, buf)
		switch {
		case err == nil:
			return string(buf[:n]), nil
		case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP):
			return "", nil
		case errors.Is(err, unix.ERANGE):
			buf = make([]byte, 2*len(buf))
		default:
			return "", &fs.PathError{Op: "getxattr " + name, Path: p, Err: err}
		}
		if len(buf) > 1<<16 {
			return "", &fs.PathError{Op: "getxattr " + name, Path: p, Err: unix.ERANGE}
		}
	}
}

// beforeOpen, when set (by tests), runs between the stat of an upper
// entry and its open, where a lease's process could swap it.
var beforeOpen func(dir *os.File, name string)

// errChanged: an entry changed type or went away while it was scanned;
// the scan keeps what it had for the name (as for one removed meanwhile).
var errChanged = errors.New("changed while scanned")

// changed reports an error of opening a name that was replaced or
// removed since it was stat'ed: a symlink where O_NOFOLLOW was asked
// (ELOOP), a non-directory where O_DIRECTORY was (ENOTDIR), or nothing.
func changed(err error) bool {
	return errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENOENT)
}

// openDirAt opens the directory name in dfd without following a symlink.
func openDirAt(dfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if changed(err) {
			return nil, errChanged
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// readlinkat reads the symlink name in dfd.
func readlinkat(dfd int, name string) (string, error) {
	buf := make([]byte, checkpoint.MaxTargetLen+2)
	n, err := unix.Readlinkat(dfd, name, buf)
	if err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return "", errChanged // no longer a symlink, or gone
		}
		return "", err
	}
	return string(buf[:n]), nil
}

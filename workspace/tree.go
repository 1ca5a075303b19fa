package workspace

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
)

// maxHops bounds the symlinks followed while resolving one path, as Linux does.
const maxHops = 40

// dir is one directory of a transaction: loaded from a tree object and
// possibly changed. Its entries are a private copy, sorted by name.
type dir struct {
	hash    checkpoint.Hash    // the tree it was loaded from; zero for a new directory
	entries []checkpoint.Entry // sorted by name (byte order)
	kids    map[string]*dir    // loaded subdirectories; a key always names a TypeDir entry
	dirty   bool               // entries changed since loading
}

func newDir(h checkpoint.Hash, entries []checkpoint.Entry) *dir {
	return &dir{hash: h, entries: entries, kids: make(map[string]*dir)}
}

// find returns the index of name, or where it would be inserted.
func (d *dir) find(name string) (int, bool) {
	i := sort.Search(len(d.entries), func(i int) bool { return d.entries[i].Name >= name })
	return i, i < len(d.entries) && d.entries[i].Name == name
}

// lookup returns a copy of the entry name, or nil.
func (d *dir) lookup(name string) *checkpoint.Entry {
	if i, ok := d.find(name); ok {
		e := d.entries[i]
		return &e
	}
	return nil
}

// put adds or replaces the entry e.Name. kid is the loaded directory for a
// TypeDir entry, or nil to load it from e.Tree when needed.
func (d *dir) put(e checkpoint.Entry, kid *dir) {
	if i, ok := d.find(e.Name); ok {
		d.entries[i] = e
	} else {
		d.entries = slices.Insert(d.entries, i, e)
	}
	if kid != nil && e.Type == checkpoint.TypeDir {
		d.kids[e.Name] = kid
	} else {
		delete(d.kids, e.Name)
	}
	d.dirty = true
}

// del removes the entry name, if any.
func (d *dir) del(name string) {
	if i, ok := d.find(name); ok {
		d.entries = slices.Delete(d.entries, i, i+1)
		delete(d.kids, name)
		d.dirty = true
	}
}

// txn is one read or read-modify-write of a workspace revision: a snapshot,
// the directories loaded so far, and for a mutation a Writer.
type txn struct {
	fs   *FS
	snap *checkpoint.Snapshot
	w    *checkpoint.Writer // nil for reads
	root *dir
	now  int64 // ModTime of written entries, unix nanoseconds

	// sizeDelta and filesDelta track the change of the revision's total
	// file bytes and file count.
	sizeDelta, filesDelta int64
}

// child returns the loaded directory of d.entries[i], a TypeDir entry.
func (t *txn) child(ctx context.Context, d *dir, i int) (*dir, error) {
	e := &d.entries[i]
	if k := d.kids[e.Name]; k != nil {
		return k, nil
	}
	k, err := t.load(ctx, e.Tree)
	if err != nil {
		return nil, err
	}
	d.kids[e.Name] = k
	return k, nil
}

// load reads a tree object into a new dir.
func (t *txn) load(ctx context.Context, h checkpoint.Hash) (*dir, error) {
	tree, err := t.snap.Tree(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("read tree %s: %w", h, err)
	}
	return newDir(h, slices.Clone(tree.Entries)), nil
}

// flush writes every changed directory under and including d, children
// first, and returns d's digest and whether it differs from the loaded one.
func (t *txn) flush(ctx context.Context, d *dir) (checkpoint.Hash, bool, error) {
	changed := d.dirty
	for name, k := range d.kids {
		h, c, err := t.flush(ctx, k)
		if err != nil {
			return checkpoint.Hash{}, false, err
		} else if c {
			i, ok := d.find(name)
			if !ok || d.entries[i].Type != checkpoint.TypeDir {
				return checkpoint.Hash{}, false, fmt.Errorf("flush: loaded directory %q has no entry", name)
			}
			d.entries[i].Tree = h
			changed = true
		}
	}
	if !changed {
		return d.hash, false, nil
	}
	h, err := t.w.WriteTree(ctx, &checkpoint.Tree{Entries: d.entries})
	if err != nil {
		return checkpoint.Hash{}, false, fmt.Errorf("write tree: %w", err)
	}
	return h, h != d.hash, nil
}

// account adds (sign 1) or removes (sign -1) an entry from the totals of
// the revision; a directory counts everything below it.
func (t *txn) account(ctx context.Context, d *dir, i int, sign int64) error {
	e := &d.entries[i]
	switch e.Type {
	case checkpoint.TypeFile:
		t.sizeDelta += sign * e.Size
		t.filesDelta += sign
	case checkpoint.TypeDir:
		k, err := t.child(ctx, d, i)
		if err != nil {
			return err
		}
		for j := range k.entries {
			if err := t.account(ctx, k, j, sign); err != nil {
				return err
			}
		}
	}
	return nil
}

// loc is where a path resolved to: the entry name in directory parent.
type loc struct {
	parent *dir   // nil for the root
	name   string // "" for the root
	dirs   []*dir // the directories from the root to parent, inclusive
	path   string // the resolved canonical path ("." for the root)
}

func (l *loc) root() bool { return l.parent == nil }

// entry returns a copy of the entry at l, or nil if it does not exist (or l is the root).
func (l *loc) entry() *checkpoint.Entry {
	if l.parent == nil {
		return nil
	}
	return l.parent.lookup(l.name)
}

// resolve walks the clean path p from the root. Symlinks in the middle are
// followed, and the final one if follow; a symlink whose target is absolute
// (outside the mount point) or climbs above the root, or more than maxHops
// symlinks, is EINVALIDPATH. A missing final name is not an error (the loc
// has no entry); a missing directory is ENOTFOUND unless create, which adds
// it. A non-directory in the middle is ENOTDIR.
func (t *txn) resolve(ctx context.Context, p string, follow, create bool) (*loc, error) {
	queue := splitPath(p)
	dirs := []*dir{t.root}
	var names []string
	hops := 0
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			// Only symlink targets hold "..": CleanPath removed the caller's.
			if len(names) == 0 {
				return nil, bothy.Errorf(bothy.EINVALIDPATH, "path %q goes through a symlink that leaves the workspace", p)
			}
			dirs, names = dirs[:len(dirs)-1], names[:len(names)-1]
			continue
		}
		if len(name) > t.fs.opts.MaxName || strings.IndexByte(name, 0) >= 0 {
			// Only a symlink target can hold such a name: CleanPath refused the caller's.
			return nil, bothy.Errorf(bothy.EINVALIDPATH, "path %q goes through a symlink to an invalid name", p)
		}
		cur := dirs[len(dirs)-1]
		last := len(queue) == 0
		i, ok := cur.find(name)
		if !ok {
			if last {
				return &loc{parent: cur, name: name, dirs: dirs, path: joinPath(strings.Join(names, "/"), name)}, nil
			} else if !create {
				return nil, bothy.Errorf(bothy.ENOTFOUND, "path %q: %q does not exist", p, joinPath(strings.Join(names, "/"), name))
			}
			kid := newDir(checkpoint.Hash{}, nil)
			kid.dirty = true
			cur.put(checkpoint.Entry{Name: name, Type: checkpoint.TypeDir, Mode: 0o755}, kid)
			dirs, names = append(dirs, kid), append(names, name)
			continue
		}
		e := &cur.entries[i]
		if e.Type == checkpoint.TypeSymlink && (!last || follow) {
			if hops++; hops > maxHops {
				return nil, bothy.Errorf(bothy.EINVALIDPATH, "path %q: too many levels of symlinks", p)
			}
			target, fromRoot, err := t.fs.linkTarget(p, e.Target)
			if err != nil {
				return nil, err
			}
			if fromRoot {
				dirs, names = dirs[:1], nil
			}
			queue = append(strings.Split(target, "/"), queue...)
			continue
		}
		if last {
			return &loc{parent: cur, name: name, dirs: dirs, path: joinPath(strings.Join(names, "/"), name)}, nil
		} else if e.Type != checkpoint.TypeDir {
			return nil, bothy.Errorf(bothy.ENOTDIR, "path %q: %q is not a directory", p, joinPath(strings.Join(names, "/"), name))
		}
		kid, err := t.child(ctx, cur, i)
		if err != nil {
			return nil, err
		}
		dirs, names = append(dirs, kid), append(names, name)
	}
	// The path ended on a directory, through "..", "." or a trailing slash.
	if len(names) == 0 {
		return &loc{path: "."}, nil
	}
	n := len(names)
	return &loc{parent: dirs[n-1], name: names[n-1], dirs: dirs[:n], path: strings.Join(names, "/")}, nil
}

// dirAt returns the directory at l, or ENOTDIR (ENOTFOUND if missing).
func (t *txn) dirAt(ctx context.Context, l *loc, p string) (*dir, error) {
	if l.root() {
		return t.root, nil
	}
	i, ok := l.parent.find(l.name)
	if !ok {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "%q does not exist", p)
	} else if l.parent.entries[i].Type != checkpoint.TypeDir {
		return nil, bothy.Errorf(bothy.ENOTDIR, "%q is not a directory", p)
	}
	return t.child(ctx, l.parent, i)
}

// rootInfo describes the workspace root.
func rootInfo() *bothy.FileInfo {
	return &bothy.FileInfo{Path: ".", Name: ".", Type: bothy.FileTypeDir, Mode: 0o755}
}

// fileInfo describes entry e found at path p.
func fileInfo(p string, e *checkpoint.Entry) *bothy.FileInfo {
	fi := &bothy.FileInfo{Path: p, Name: baseName(p), Mode: e.Mode & fs.ModePerm, Size: e.Size, Target: e.Target}
	switch e.Type {
	case checkpoint.TypeDir:
		fi.Type = bothy.FileTypeDir
	case checkpoint.TypeSymlink:
		fi.Type = bothy.FileTypeSymlink
	default:
		fi.Type = bothy.FileTypeFile
	}
	if e.ModTime != 0 {
		fi.ModTime = time.Unix(0, e.ModTime).UTC()
	}
	return fi
}

package workspace

import (
	"context"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
)

// FuzzResolve walks random paths through a small in-memory tree holding
// symlinks with random targets. It is an internal test because it builds the
// tree without a store: every directory is pre-loaded, so resolve never reads.
func FuzzResolve(f *testing.F) {
	for _, s := range [][3]string{
		{"a/s2/x", "..", "b"},
		{"s1/passwd", "/etc", "x"},
		{"s1/s1", "s1", "s1"},
		{"a/s2/s2", "../s1", "a/s2"},
		{"s1/g", "a", ".."},
		{"a/s2/../f", "/workspace/a", "../../x"},
		{"s1", "a/b/../../..", "."},
	} {
		f.Add(s[0], s[1], s[2], true, false)
	}
	f.Fuzz(func(t *testing.T, p, t1, t2 string, follow, create bool) {
		if t1 == "" || t2 == "" {
			return
		}
		fsys := New(nil, nil, Options{MountPoint: "/workspace"})
		file := func(name string) checkpoint.Entry {
			return checkpoint.Entry{Name: name, Type: checkpoint.TypeFile, Mode: 0o644}
		}
		link := func(name, target string) checkpoint.Entry {
			return checkpoint.Entry{Name: name, Type: checkpoint.TypeSymlink, Mode: 0o777, Target: target}
		}
		root, a, b := newDir(checkpoint.Hash{}, nil), newDir(checkpoint.Hash{}, nil), newDir(checkpoint.Hash{}, nil)
		a.put(checkpoint.Entry{Name: "b", Type: checkpoint.TypeDir}, b)
		a.put(file("g"), nil)
		a.put(link("s2", t2), nil)
		root.put(checkpoint.Entry{Name: "a", Type: checkpoint.TypeDir}, a)
		root.put(file("f"), nil)
		root.put(link("s1", t1), nil)
		tx := &txn{fs: fsys, root: root}

		clean, err := CleanPath(p)
		if err != nil {
			return
		}
		l, err := tx.resolve(context.Background(), clean, follow, create)
		if err != nil {
			switch bothy.ErrorCode(err) {
			case bothy.EINVALIDPATH, bothy.ENOTFOUND, bothy.ENOTDIR:
				return
			}
			t.Fatalf("resolve %q: %v", clean, err)
		}
		again, err := CleanPath(l.path)
		if err != nil || again != l.path {
			t.Fatalf("resolve %q gave non-canonical path %q", clean, l.path)
		}
		// The loc must be where its path says, in the tree.
		d := root
		elems := splitPath(l.path)
		if l.root() != (len(elems) == 0) {
			t.Fatalf("resolve %q: root %v but path %q", clean, l.root(), l.path)
		}
		for i, name := range elems {
			if d == nil {
				t.Fatalf("resolve %q: path %q runs through a non-directory", clean, l.path)
			}
			if i == len(elems)-1 {
				if d != l.parent || name != l.name {
					t.Fatalf("resolve %q: loc (%q) is not at path %q", clean, l.name, l.path)
				}
				break
			}
			d = d.kids[name]
		}
		if e := l.entry(); e != nil && e.Type == checkpoint.TypeSymlink && follow {
			t.Fatalf("resolve %q with follow ended on a symlink", clean)
		}
	})
}

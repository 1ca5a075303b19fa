package filetest

import (
	"slices"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/storetest"
)

func testReadFile(t *testing.T, open opener) {
	t.Run("OK", func(t *testing.T) {
		f := open(t)
		f.write("src/main.go", "package main\n")
		got, fi := f.readRange("/src/main.go", 0, -1)
		if got != "package main\n" {
			t.Fatalf("content %q", got)
		}
		if fi.Path != "src/main.go" || fi.Name != "main.go" || fi.Type != bothy.FileTypeFile || fi.Size != 13 || fi.Mode != 0o644 || fi.ModTime.IsZero() {
			t.Fatalf("info %+v", fi)
		}
	})
	t.Run("Range", func(t *testing.T) {
		f := open(t)
		f.write("f", "0123456789")
		for _, c := range []struct {
			off, length int64
			want        string
		}{{2, 3, "234"}, {7, -1, "789"}, {7, 100, "789"}, {3, 0, ""}, {10, -1, ""}, {1000, 5, ""}} {
			if got, fi := f.readRange("f", c.off, c.length); got != c.want || fi.Size != 10 {
				t.Errorf("ReadFile(off %d, length %d) = %q, size %d; want %q, size 10", c.off, c.length, got, fi.Size, c.want)
			}
		}
	})
	t.Run("Symlink", func(t *testing.T) {
		f := open(t)
		f.write("dir/target", "through the link")
		f.symlink("dir/target", "link")
		f.symlink("dir", "dirlink")
		if got := f.read("link"); got != "through the link" {
			t.Fatalf("read through a final symlink: %q", got)
		}
		if got := f.read("dirlink/target"); got != "through the link" {
			t.Fatalf("read through a symlink in the middle: %q", got)
		}
	})
	t.Run("ErrIsDir", func(t *testing.T) {
		f := open(t)
		f.mkdir("d")
		_, _, err := f.Files.ReadFile(f.ctx, f.TenantID, f.id, "d", 0, -1)
		storetest.WantCode(t, err, bothy.EISDIR)
		_, _, err = f.Files.ReadFile(f.ctx, f.TenantID, f.id, "/", 0, -1)
		storetest.WantCode(t, err, bothy.EISDIR)
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		_, _, err := f.Files.ReadFile(f.ctx, f.TenantID, f.id, "f", -1, -1)
		storetest.WantCode(t, err, bothy.EINVALID)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := open(t)
		_, _, err := f.Files.ReadFile(f.ctx, f.TenantID, f.id, "missing", 0, -1)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		f.symlink("missing", "dangling")
		_, _, err = f.Files.ReadFile(f.ctx, f.TenantID, f.id, "dangling", 0, -1)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
	t.Run("ErrNotDir", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		_, _, err := f.Files.ReadFile(f.ctx, f.TenantID, f.id, "f/g", 0, -1)
		storetest.WantCode(t, err, bothy.ENOTDIR)
	})
}

func testStat(t *testing.T, open opener) {
	t.Run("OK", func(t *testing.T) {
		f := open(t)
		f.write("a/b.txt", "hello")
		if fi := f.stat("a/b.txt"); fi.Path != "a/b.txt" || fi.Name != "b.txt" || fi.Type != bothy.FileTypeFile || fi.Size != 5 || fi.Mode != 0o644 {
			t.Errorf("Stat(file) = %+v", fi)
		}
		if fi := f.stat("a"); fi.Type != bothy.FileTypeDir || fi.Size != 0 || fi.Mode != 0o755 || !fi.ModTime.IsZero() {
			t.Errorf("Stat(dir) = %+v; a directory has size 0, no time", fi)
		}
		for _, root := range []string{"", "/", "."} {
			if fi := f.stat(root); fi.Path != "." || fi.Name != "." || fi.Type != bothy.FileTypeDir {
				t.Errorf("Stat(%q) = %+v, want the root", root, fi)
			}
		}
	})
	t.Run("Symlink", func(t *testing.T) {
		f := open(t)
		f.write("target.txt", "hello")
		f.symlink("target.txt", "link")
		if fi := f.stat("link"); fi.Path != "link" || fi.Type != bothy.FileTypeFile || fi.Size != 5 {
			t.Errorf("Stat(link) = %+v, want the target's info at the link's path", fi)
		}
		if fi := f.lstat("link"); fi.Type != bothy.FileTypeSymlink || fi.Target != "target.txt" || fi.Size != int64(len("target.txt")) {
			t.Errorf("Lstat(link) = %+v", fi)
		}
		if fi := f.lstat("target.txt"); fi.Type != bothy.FileTypeFile {
			t.Errorf("Lstat(file) = %+v", fi)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := open(t)
		f.symlink("nowhere", "dangling")
		_, err := f.Files.Stat(f.ctx, f.TenantID, f.id, "dangling")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		if fi := f.lstat("dangling"); fi.Type != bothy.FileTypeSymlink || fi.Target != "nowhere" {
			t.Errorf("Lstat(dangling) = %+v", fi)
		}
		_, err = f.Files.Stat(f.ctx, f.TenantID, f.id, "missing")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
	t.Run("ErrNotDir", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		_, err := f.Files.Stat(f.ctx, f.TenantID, f.id, "f/g")
		storetest.WantCode(t, err, bothy.ENOTDIR)
		_, err = f.Files.Lstat(f.ctx, f.TenantID, f.id, "f/g")
		storetest.WantCode(t, err, bothy.ENOTDIR)
	})
}

func testReadDir(t *testing.T, open opener) {
	t.Run("OK", func(t *testing.T) {
		f := open(t)
		for _, p := range []string{"d/c", "d/a", "d/b/x"} {
			f.write(p, p)
		}
		f.symlink("a", "d/link")
		infos, err := f.Files.ReadDir(f.ctx, f.TenantID, f.id, "d", bothy.ReadDirOptions{})
		if err != nil {
			t.Fatal(err)
		} else if got, want := names(infos), []string{"d/a", "d/b", "d/c", "d/link"}; !slices.Equal(got, want) {
			t.Fatalf("ReadDir = %q, want %q (sorted by name)", got, want)
		}
		if infos[1].Type != bothy.FileTypeDir || infos[3].Type != bothy.FileTypeSymlink || infos[3].Target != "a" {
			t.Errorf("entries do not follow symlinks: %+v, %+v", infos[1], infos[3])
		}
		root, err := f.Files.ReadDir(f.ctx, f.TenantID, f.id, "/", bothy.ReadDirOptions{})
		if err != nil || !slices.Equal(names(root), []string{"d"}) {
			t.Errorf("ReadDir(/) = %q, %v", names(root), err)
		}
	})
	t.Run("Empty", func(t *testing.T) {
		f := open(t)
		infos, err := f.Files.ReadDir(f.ctx, f.TenantID, f.id, "", bothy.ReadDirOptions{})
		if err != nil || len(infos) != 0 {
			t.Fatalf("ReadDir of an empty workspace = %q, %v", names(infos), err)
		}
	})
	t.Run("Page", func(t *testing.T) {
		f := open(t)
		for _, p := range []string{"e", "d", "c", "b", "a"} {
			f.write(p, p)
		}
		for _, c := range []struct {
			opts bothy.ReadDirOptions
			want []string
		}{{bothy.ReadDirOptions{Limit: 2}, []string{"a", "b"}}, {bothy.ReadDirOptions{Offset: 2, Limit: 2}, []string{"c", "d"}},
			{bothy.ReadDirOptions{Offset: 4}, []string{"e"}}, {bothy.ReadDirOptions{Offset: 9}, []string{}}} {
			infos, err := f.Files.ReadDir(f.ctx, f.TenantID, f.id, "", c.opts)
			if err != nil || !slices.Equal(names(infos), c.want) {
				t.Errorf("ReadDir(%+v) = %q, %v; want %q", c.opts, names(infos), err, c.want)
			}
		}
	})
	t.Run("Symlink", func(t *testing.T) {
		f := open(t)
		f.write("real/x", "x")
		f.symlink("real", "link")
		infos, err := f.Files.ReadDir(f.ctx, f.TenantID, f.id, "link", bothy.ReadDirOptions{})
		if err != nil || len(infos) != 1 || infos[0].Name != "x" {
			t.Fatalf("ReadDir through a final symlink = %+v, %v", infos, err)
		}
	})
	t.Run("ErrNotDir", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		_, err := f.Files.ReadDir(f.ctx, f.TenantID, f.id, "f", bothy.ReadDirOptions{})
		storetest.WantCode(t, err, bothy.ENOTDIR)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := open(t)
		_, err := f.Files.ReadDir(f.ctx, f.TenantID, f.id, "missing", bothy.ReadDirOptions{})
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
}

func testGlob(t *testing.T, open opener) {
	t.Run("OK", func(t *testing.T) {
		f := open(t)
		for _, p := range []string{"a.go", "b.txt", "src/c.go", "src/deep/d.go", "src/deep/e.txt"} {
			f.write(p, p)
		}
		f.symlink("src", "link")
		for _, c := range []struct {
			pattern string
			want    []string
		}{
			{"*.go", []string{"a.go"}},
			{"src/*.go", []string{"src/c.go"}},
			{"**/*.go", []string{"a.go", "src/c.go", "src/deep/d.go"}},
			{"src/**", []string{"src", "src/c.go", "src/deep", "src/deep/d.go", "src/deep/e.txt"}},
			{"li*", []string{"link"}}, // symlinks are matched
			{"link/*", []string{}},    // but not descended into
			{"nothing*", []string{}},
		} {
			infos, err := f.Files.Glob(f.ctx, f.TenantID, f.id, c.pattern, 0)
			got := names(infos)
			slices.Sort(got)
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("Glob(%q) = %q, %v; want %q", c.pattern, got, err, c.want)
			}
		}
	})
	t.Run("Limit", func(t *testing.T) {
		f := open(t)
		for _, p := range []string{"a", "b", "c"} {
			f.write(p, p)
		}
		if infos, err := f.Files.Glob(f.ctx, f.TenantID, f.id, "*", 2); err != nil || len(infos) != 2 {
			t.Fatalf("Glob(*, limit 2) = %q, %v", names(infos), err)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		f := open(t)
		for _, pattern := range []string{"[", "a/[b", strings.Repeat("**/d/", 9) + "x"} {
			_, err := f.Files.Glob(f.ctx, f.TenantID, f.id, pattern, 0)
			storetest.WantCode(t, err, bothy.EINVALID)
		}
	})
}

func testGrep(t *testing.T, open opener) {
	t.Run("OK", func(t *testing.T) {
		f := open(t)
		f.write("a.txt", "one\nHello world\nthree\n")
		f.write("sub/b.md", "hello again\n")
		f.write("bin", "hello\x00binary\n")
		f.symlink("a.txt", "link")
		res, err := f.Files.Grep(f.ctx, f.TenantID, f.id, bothy.GrepOptions{Pattern: "hel+o", IgnoreCase: true, Context: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Matches) != 2 || res.Truncated {
			t.Fatalf("Grep = %+v, want a.txt and sub/b.md (binary files skipped, symlinks not followed)", res)
		}
		slices.SortFunc(res.Matches, func(a, b bothy.GrepMatch) int { return strings.Compare(a.Path, b.Path) })
		m := res.Matches[0]
		if m.Path != "a.txt" || m.Line != 2 || m.Text != "Hello world" || !slices.Equal(m.Before, []string{"one"}) || !slices.Equal(m.After, []string{"three"}) {
			t.Errorf("match %+v", m)
		}
		if res.Matches[1].Path != "sub/b.md" || res.Matches[1].Line != 1 {
			t.Errorf("match %+v", res.Matches[1])
		}
		if res.FilesScanned < 2 || res.BytesScanned <= 0 {
			t.Errorf("scanned %d files, %d bytes", res.FilesScanned, res.BytesScanned)
		}
	})
	t.Run("Options", func(t *testing.T) {
		f := open(t)
		f.write("a.txt", "a+b\nab\n")
		f.write("sub/a.txt", "a+b\n")
		f.write("sub/c.go", "a+b\n")
		count := func(opts bothy.GrepOptions) int {
			t.Helper()
			res, err := f.Files.Grep(f.ctx, f.TenantID, f.id, opts)
			if err != nil {
				t.Fatalf("Grep(%+v): %v", opts, err)
			}
			return len(res.Matches)
		}
		if n := count(bothy.GrepOptions{Pattern: "a+b", Literal: true}); n != 3 {
			t.Errorf("literal: %d matches, want 3", n)
		}
		if n := count(bothy.GrepOptions{Pattern: "a+b"}); n != 1 {
			t.Errorf("regexp: %d matches, want 1 (only \"ab\")", n)
		}
		if n := count(bothy.GrepOptions{Pattern: "a+b", Literal: true, Include: "*.txt"}); n != 2 {
			t.Errorf("include *.txt: %d matches, want 2", n)
		}
		if n := count(bothy.GrepOptions{Pattern: "a+b", Literal: true, Path: "sub"}); n != 2 {
			t.Errorf("path sub: %d matches, want 2", n)
		}
		res, err := f.Files.Grep(f.ctx, f.TenantID, f.id, bothy.GrepOptions{Pattern: "b", Limit: 1})
		if err != nil || len(res.Matches) != 1 || !res.Truncated {
			t.Errorf("limit 1: %+v, %v; want one match, truncated", res, err)
		}
	})
	t.Run("NoMatch", func(t *testing.T) {
		f := open(t)
		f.write("a.txt", "text\n")
		res, err := f.Files.Grep(f.ctx, f.TenantID, f.id, bothy.GrepOptions{Pattern: "absent"})
		if err != nil || res.Matches == nil || len(res.Matches) != 0 || res.Truncated {
			t.Fatalf("Grep(absent) = %+v, %v; want an empty, non-nil list", res, err)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		f := open(t)
		_, err := f.Files.Grep(f.ctx, f.TenantID, f.id, bothy.GrepOptions{Pattern: "("})
		storetest.WantCode(t, err, bothy.EINVALID)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := open(t)
		_, err := f.Files.Grep(f.ctx, f.TenantID, f.id, bothy.GrepOptions{Pattern: "x", Path: "missing"})
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
}

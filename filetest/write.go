package filetest

import (
	"bytes"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/storetest"
)

func testWriteFile(t *testing.T, open opener) {
	write := func(f *fixture, p, data string, opts bothy.WriteOptions) (*bothy.Revision, error) {
		return f.Files.WriteFile(f.ctx, f.TenantID, f.id, p, strings.NewReader(data), opts)
	}
	t.Run("OK", func(t *testing.T) {
		f := open(t)
		rev, err := write(f, "f.txt", "one", bothy.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.wantRevision(rev, 1)
		if rev.FileCount != 1 || rev.Size != 3 || rev.RootDigest == "" {
			t.Errorf("revision %+v, want 1 file of 3 bytes", rev)
		}
		if got := f.read("f.txt"); got != "one" {
			t.Errorf("content %q", got)
		}
		if fi := f.stat("f.txt"); fi.Mode != 0o644 {
			t.Errorf("new file mode %v, want 0644", fi.Mode)
		}
	})
	t.Run("Replace", func(t *testing.T) {
		f := open(t)
		f.write("f", "first")
		if _, err := f.Files.Chmod(f.ctx, f.TenantID, f.id, "f", 0o600); err != nil {
			t.Fatal(err)
		}
		rev, err := write(f, "/f", "second", bothy.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.wantRevision(rev, 3)
		if got, fi := f.read("f"), f.stat("f"); got != "second" || fi.Mode != 0o600 {
			t.Errorf("replaced: %q mode %v, want \"second\" keeping mode 0600", got, fi.Mode)
		}
		if _, err := write(f, "f", "third", bothy.WriteOptions{Mode: 0o755}); err != nil {
			t.Fatal(err)
		} else if fi := f.stat("f"); fi.Mode != 0o755 {
			t.Errorf("mode %v after a write with mode 0755", fi.Mode)
		}
	})
	t.Run("Empty", func(t *testing.T) {
		f := open(t)
		if _, err := write(f, "empty", "", bothy.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if fi := f.stat("empty"); fi.Type != bothy.FileTypeFile || fi.Size != 0 {
			t.Errorf("empty file %+v", fi)
		}
	})
	t.Run("MkdirParents", func(t *testing.T) {
		f := open(t)
		if _, err := write(f, "p/q/r.txt", "r", bothy.WriteOptions{MkdirParents: true}); err != nil {
			t.Fatal(err)
		}
		if fi := f.stat("p/q"); fi.Type != bothy.FileTypeDir || fi.Mode != 0o755 {
			t.Errorf("parent %+v, want a directory of mode 0755", fi)
		}
	})
	t.Run("Symlink", func(t *testing.T) {
		f := open(t)
		f.write("target", "old")
		f.symlink("target", "link")
		if _, err := write(f, "link", "new", bothy.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if got, fi := f.read("target"), f.lstat("link"); got != "new" || fi.Type != bothy.FileTypeSymlink {
			t.Errorf("a write through a symlink: target %q, link %+v", got, fi)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := open(t)
		_, err := write(f, "missing/f", "x", bothy.WriteOptions{})
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		f.missing("missing")
	})
	t.Run("ErrIsDir", func(t *testing.T) {
		f := open(t)
		f.mkdir("d")
		_, err := write(f, "d", "x", bothy.WriteOptions{})
		storetest.WantCode(t, err, bothy.EISDIR)
	})
	t.Run("ErrConflict", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		f.symlink("nowhere", "dangling")
		f.mkdir("d")
		for _, p := range []string{"f", "dangling", "d"} {
			_, err := write(f, p, "y", bothy.WriteOptions{Exclusive: true})
			storetest.WantCode(t, err, bothy.ECONFLICT)
		}
		if got := f.read("f"); got != "x" {
			t.Errorf("an exclusive write changed the file: %q", got)
		}
		f.missing("nowhere")
		if _, err := write(f, "new", "n", bothy.WriteOptions{Exclusive: true}); err != nil {
			t.Errorf("exclusive write of a new file: %v", err)
		}
	})
	t.Run("ErrNotDir", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		_, err := write(f, "f/g", "y", bothy.WriteOptions{MkdirParents: true})
		storetest.WantCode(t, err, bothy.ENOTDIR)
	})
	t.Run("ErrTooLarge", func(t *testing.T) {
		f := open(t)
		big := bytes.Repeat([]byte("x"), int(f.MaxFileSize)+1)
		_, err := f.Files.WriteFile(f.ctx, f.TenantID, f.id, "big", bytes.NewReader(big), bothy.WriteOptions{})
		storetest.WantCode(t, err, bothy.ETOOLARGE)
		f.missing("big")
		if _, err := f.Files.WriteFile(f.ctx, f.TenantID, f.id, "max", bytes.NewReader(big[1:]), bothy.WriteOptions{}); err != nil {
			t.Fatalf("a file of exactly the limit: %v", err)
		}
	})
}

func testMkdir(t *testing.T, open opener) {
	t.Run("OK", func(t *testing.T) {
		f := open(t)
		rev, err := f.Files.Mkdir(f.ctx, f.TenantID, f.id, "d", bothy.MkdirOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.wantRevision(rev, 1)
		if fi := f.stat("d"); fi.Type != bothy.FileTypeDir || fi.Mode != 0o755 {
			t.Errorf("Mkdir made %+v, want a directory of mode 0755", fi)
		}
		if _, err := f.Files.Mkdir(f.ctx, f.TenantID, f.id, "d/e", bothy.MkdirOptions{Mode: 0o700}); err != nil {
			t.Fatal(err)
		} else if fi := f.stat("d/e"); fi.Mode != 0o700 {
			t.Errorf("mode %v, want 0700", fi.Mode)
		}
	})
	t.Run("Parents", func(t *testing.T) {
		f := open(t)
		rev, err := f.Files.Mkdir(f.ctx, f.TenantID, f.id, "a/b/c", bothy.MkdirOptions{Parents: true})
		if err != nil {
			t.Fatal(err)
		}
		f.wantRevision(rev, 1)
		if fi := f.stat("a/b"); fi.Type != bothy.FileTypeDir {
			t.Errorf("parent %+v", fi)
		}
		// An existing directory is fine, and commits nothing.
		rev, err = f.Files.Mkdir(f.ctx, f.TenantID, f.id, "a/b", bothy.MkdirOptions{Parents: true})
		if err != nil {
			t.Fatal(err)
		}
		f.wantRevision(rev, 1)
	})
	t.Run("ErrConflict", func(t *testing.T) {
		f := open(t)
		f.mkdir("d")
		f.write("f", "x")
		_, err := f.Files.Mkdir(f.ctx, f.TenantID, f.id, "d", bothy.MkdirOptions{})
		storetest.WantCode(t, err, bothy.ECONFLICT)
		_, err = f.Files.Mkdir(f.ctx, f.TenantID, f.id, "f", bothy.MkdirOptions{})
		storetest.WantCode(t, err, bothy.ECONFLICT)
		if f.current() != 2 {
			t.Error("a failed mkdir committed")
		}
	})
	t.Run("ErrNotDir", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		_, err := f.Files.Mkdir(f.ctx, f.TenantID, f.id, "f", bothy.MkdirOptions{Parents: true})
		storetest.WantCode(t, err, bothy.ENOTDIR)
		if f.current() != 1 {
			t.Error("a failed mkdir committed")
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := open(t)
		_, err := f.Files.Mkdir(f.ctx, f.TenantID, f.id, "x/y", bothy.MkdirOptions{})
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		f.missing("x")
	})
}

func testRemove(t *testing.T, open opener) {
	remove := func(f *fixture, p string, opts bothy.RemoveOptions) (*bothy.Revision, error) {
		return f.Files.Remove(f.ctx, f.TenantID, f.id, p, opts)
	}
	t.Run("OK", func(t *testing.T) {
		f := open(t)
		f.write("d/f", "x")
		f.mkdir("empty")
		rev, err := remove(f, "d/f", bothy.RemoveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.wantRevision(rev, 3)
		f.missing("d/f")
		if _, err := remove(f, "empty", bothy.RemoveOptions{}); err != nil {
			t.Fatalf("remove an empty directory: %v", err)
		}
		f.missing("empty")
	})
	t.Run("Symlink", func(t *testing.T) {
		f := open(t)
		f.write("d/target", "kept")
		f.symlink("d/target", "link")
		f.symlink("d", "dirlink")
		for _, p := range []string{"link", "dirlink"} {
			if _, err := remove(f, p, bothy.RemoveOptions{Recursive: true}); err != nil {
				t.Fatal(err)
			}
			f.missing(p)
		}
		if got := f.read("d/target"); got != "kept" {
			t.Errorf("removing symlinks changed their target: %q", got)
		}
	})
	t.Run("Recursive", func(t *testing.T) {
		f := open(t)
		f.write("d/a/b", "x")
		f.write("d/c", "y")
		if _, err := remove(f, "d", bothy.RemoveOptions{Recursive: true}); err != nil {
			t.Fatal(err)
		}
		f.missing("d")
	})
	t.Run("Force", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		rev, err := remove(f, "missing", bothy.RemoveOptions{Force: true})
		if err != nil {
			t.Fatal(err)
		}
		f.wantRevision(rev, 1) // nothing to remove, nothing committed
	})
	t.Run("ErrNotEmpty", func(t *testing.T) {
		f := open(t)
		f.write("d/f", "x")
		_, err := remove(f, "d", bothy.RemoveOptions{})
		storetest.WantCode(t, err, bothy.ENOTEMPTY)
		if got := f.read("d/f"); got != "x" {
			t.Errorf("content %q", got)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := open(t)
		_, err := remove(f, "missing", bothy.RemoveOptions{})
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		for _, root := range []string{"", "/", "."} {
			_, err := remove(f, root, bothy.RemoveOptions{Recursive: true, Force: true})
			storetest.WantCode(t, err, bothy.EINVALID)
		}
		if got := f.read("f"); got != "x" {
			t.Errorf("content %q", got)
		}
	})
}

func testRename(t *testing.T, open opener) {
	rename := func(f *fixture, from, to string) (*bothy.Revision, error) {
		return f.Files.Rename(f.ctx, f.TenantID, f.id, from, to)
	}
	t.Run("OK", func(t *testing.T) {
		f := open(t)
		f.write("a/f", "content")
		f.mkdir("b")
		rev, err := rename(f, "a/f", "b/g")
		if err != nil {
			t.Fatal(err)
		}
		f.wantRevision(rev, 3)
		f.missing("a/f")
		if got := f.read("b/g"); got != "content" {
			t.Errorf("renamed content %q", got)
		}
		if _, err := rename(f, "b", "c"); err != nil {
			t.Fatalf("rename a directory: %v", err)
		} else if got := f.read("c/g"); got != "content" {
			t.Errorf("moved directory's content %q", got)
		}
	})
	t.Run("Replace", func(t *testing.T) {
		f := open(t)
		f.write("src", "new")
		f.write("dst", "old")
		f.write("d1/x", "x")
		f.mkdir("d2")
		if _, err := rename(f, "src", "dst"); err != nil {
			t.Fatal(err)
		} else if got := f.read("dst"); got != "new" {
			t.Errorf("replaced file holds %q", got)
		}
		if _, err := rename(f, "d1", "d2"); err != nil {
			t.Fatalf("a directory onto an empty one: %v", err)
		} else if got := f.read("d2/x"); got != "x" {
			t.Errorf("content %q", got)
		}
	})
	t.Run("Symlink", func(t *testing.T) {
		f := open(t)
		f.write("target", "t")
		f.symlink("target", "link")
		if _, err := rename(f, "link", "moved"); err != nil {
			t.Fatal(err)
		}
		if fi := f.lstat("moved"); fi.Type != bothy.FileTypeSymlink || fi.Target != "target" {
			t.Errorf("a renamed symlink is %+v, want the link itself moved", fi)
		}
		if got := f.read("target"); got != "t" {
			t.Errorf("target %q", got)
		}
	})
	t.Run("ErrNotEmpty", func(t *testing.T) {
		f := open(t)
		f.write("d1/x", "x")
		f.write("d2/y", "y")
		_, err := rename(f, "d1", "d2")
		storetest.WantCode(t, err, bothy.ENOTEMPTY)
	})
	t.Run("ErrIsDir", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		f.mkdir("d")
		_, err := rename(f, "f", "d")
		storetest.WantCode(t, err, bothy.EISDIR)
	})
	t.Run("ErrNotDir", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		f.mkdir("d")
		_, err := rename(f, "d", "f")
		storetest.WantCode(t, err, bothy.ENOTDIR)
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		f := open(t)
		f.write("d/x", "x")
		_, err := rename(f, "d", "d/sub")
		storetest.WantCode(t, err, bothy.EINVALID)
		_, err = rename(f, "/", "elsewhere")
		storetest.WantCode(t, err, bothy.EINVALID)
		if got := f.read("d/x"); got != "x" {
			t.Errorf("content %q", got)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := open(t)
		_, err := rename(f, "missing", "to")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		f.missing("to")
	})
}

func testSymlink(t *testing.T, open opener) {
	t.Run("OK", func(t *testing.T) {
		f := open(t)
		rev := f.symlink("../outside/anything", "link")
		f.wantRevision(rev, 1)
		if fi := f.lstat("link"); fi.Type != bothy.FileTypeSymlink || fi.Target != "../outside/anything" {
			t.Errorf("Lstat = %+v, want the target verbatim", fi)
		}
		target, err := f.Files.Readlink(f.ctx, f.TenantID, f.id, "link")
		if err != nil || target != "../outside/anything" {
			t.Errorf("Readlink = %q, %v", target, err)
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		f.symlink("f", "link")
		for _, p := range []string{"f", "link"} {
			_, err := f.Files.Symlink(f.ctx, f.TenantID, f.id, "other", p)
			storetest.WantCode(t, err, bothy.ECONFLICT)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		f := open(t)
		for _, target := range []string{"", "a\x00b"} {
			_, err := f.Files.Symlink(f.ctx, f.TenantID, f.id, target, "link")
			storetest.WantCode(t, err, bothy.EINVALID)
		}
		f.missing("link")
	})
	t.Run("Readlink/ErrInvalid", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		for _, p := range []string{"f", "/"} {
			_, err := f.Files.Readlink(f.ctx, f.TenantID, f.id, p)
			storetest.WantCode(t, err, bothy.EINVALID)
		}
	})
	t.Run("Readlink/ErrNotFound", func(t *testing.T) {
		f := open(t)
		_, err := f.Files.Readlink(f.ctx, f.TenantID, f.id, "missing")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
}

func testChmod(t *testing.T, open opener) {
	t.Run("OK", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		rev, err := f.Files.Chmod(f.ctx, f.TenantID, f.id, "f", 0o751|fs.ModeSetuid)
		if err != nil {
			t.Fatal(err)
		}
		f.wantRevision(rev, 2)
		if fi := f.stat("f"); fi.Mode != 0o751 {
			t.Errorf("mode %v, want 0751 (permission bits only)", fi.Mode)
		}
		// The same mode again commits nothing.
		rev, err = f.Files.Chmod(f.ctx, f.TenantID, f.id, "f", 0o751)
		if err != nil {
			t.Fatal(err)
		}
		f.wantRevision(rev, 2)
	})
	t.Run("Symlink", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		f.symlink("f", "link")
		if _, err := f.Files.Chmod(f.ctx, f.TenantID, f.id, "link", 0o600); err != nil {
			t.Fatal(err)
		}
		if fi := f.stat("f"); fi.Mode != 0o600 {
			t.Errorf("target mode %v after chmod through a link, want 0600", fi.Mode)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		f := open(t)
		_, err := f.Files.Chmod(f.ctx, f.TenantID, f.id, "/", 0o700)
		storetest.WantCode(t, err, bothy.EINVALID)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		f := open(t)
		_, err := f.Files.Chmod(f.ctx, f.TenantID, f.id, "missing", 0o700)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
}

func testApply(t *testing.T, open opener) {
	t.Run("OK", func(t *testing.T) {
		f := open(t)
		f.write("old", "o")
		f.write("gone", "g")
		ops := []bothy.FileOp{
			{Op: bothy.FileOpWrite, Path: "batch/one", Data: []byte("1"), Parents: true},
			{Op: bothy.FileOpWrite, Path: "batch/bin", Data: []byte{0, 1, 2, 255}, Mode: 0o700},
			{Op: bothy.FileOpMkdir, Path: "m/n", Parents: true},
			{Op: bothy.FileOpRemove, Path: "gone"},
			{Op: bothy.FileOpRename, Path: "old", To: "m/new"},
			{Op: bothy.FileOpSymlink, Path: "link", Target: "batch/one"},
			{Op: bothy.FileOpChmod, Path: "batch/one", Mode: 0o600},
		}
		rev, err := f.Files.Apply(f.ctx, f.TenantID, f.id, ops)
		if err != nil {
			t.Fatal(err)
		}
		f.wantRevision(rev, 3)
		if got := f.read("batch/bin"); got != "\x00\x01\x02\xff" {
			t.Errorf("binary data %q", got)
		}
		if fi := f.stat("batch/bin"); fi.Mode != 0o700 {
			t.Errorf("mode %v", fi.Mode)
		}
		if got, fi := f.read("link"), f.stat("batch/one"); got != "1" || fi.Mode != 0o600 {
			t.Errorf("link reads %q, batch/one mode %v", got, fi.Mode)
		}
		f.missing("gone")
		f.missing("old")
		if got := f.read("m/new"); got != "o" {
			t.Errorf("renamed %q", got)
		}
	})
	t.Run("ErrAtomic", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		ops := []bothy.FileOp{
			{Op: bothy.FileOpWrite, Path: "new", Data: []byte("n")},
			{Op: bothy.FileOpRemove, Path: "f"},
			{Op: bothy.FileOpRemove, Path: "missing"},
		}
		_, err := f.Files.Apply(f.ctx, f.TenantID, f.id, ops)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		if !strings.Contains(bothy.ErrorMessage(err), "2") {
			t.Errorf("the error %q does not name the failing op's index, 2", bothy.ErrorMessage(err))
		}
		f.missing("new")
		if got := f.read("f"); got != "x" {
			t.Errorf("a failed batch removed f: %q", got)
		}
		if f.current() != 1 {
			t.Error("a failed batch committed")
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		f := open(t)
		_, err := f.Files.Apply(f.ctx, f.TenantID, f.id, nil)
		storetest.WantCode(t, err, bothy.EINVALID)
		_, err = f.Files.Apply(f.ctx, f.TenantID, f.id, []bothy.FileOp{{Op: "truncate", Path: "f"}})
		storetest.WantCode(t, err, bothy.EINVALID)
	})
	t.Run("ErrTooLarge", func(t *testing.T) {
		f := open(t)
		var ops []bothy.FileOp
		for i := range f.MaxBatch + 1 {
			ops = append(ops, bothy.FileOp{Op: bothy.FileOpWrite, Path: fmt.Sprintf("f%d", i)})
		}
		_, err := f.Files.Apply(f.ctx, f.TenantID, f.id, ops)
		storetest.WantCode(t, err, bothy.ETOOLARGE)
		f.missing("f0")
		if _, err := f.Files.Apply(f.ctx, f.TenantID, f.id, ops[:f.MaxBatch]); err != nil {
			t.Fatalf("a batch of exactly the limit: %v", err)
		}
	})
}

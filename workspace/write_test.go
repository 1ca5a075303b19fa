package workspace_test

import (
	"bytes"
	"io"
	"io/fs"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/storetest"
	"github.com/bothyhq/bothy/workspace"
)

func TestFS_WriteFile(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		write := func(p, data string, opts bothy.WriteOptions) (*bothy.Revision, error) {
			return e.fs.WriteFile(e.ctx, e.tenant, e.computer, p, strings.NewReader(data), opts)
		}
		t.Run("OK", func(t *testing.T) {
			rev, err := write("f.txt", "one", bothy.WriteOptions{})
			if err != nil {
				t.Fatal(err)
			} else if rev.Number != 1 || rev.CreatedBy != "api:write" || rev.FileCount != 1 || rev.Size != 3 || rev.RootDigest == "" {
				t.Fatalf("revision %+v", rev)
			}
			if e.read("f.txt") != "one" {
				t.Fatal("content")
			}
		})
		t.Run("Replace", func(t *testing.T) {
			if _, err := e.fs.Chmod(e.ctx, e.tenant, e.computer, "f.txt", 0o600); err != nil {
				t.Fatal(err)
			}
			rev, err := write("/f.txt", "two!", bothy.WriteOptions{})
			if err != nil {
				t.Fatal(err)
			} else if rev.Number != 3 || rev.FileCount != 1 || rev.Size != 4 {
				t.Fatalf("revision %+v", rev)
			}
			fi, err := e.fs.Stat(e.ctx, e.tenant, e.computer, "f.txt")
			if err != nil || fi.Mode != 0o600 || e.read("f.txt") != "two!" {
				t.Fatalf("replace kept mode? %+v, %v", fi, err)
			}
		})
		t.Run("Mode", func(t *testing.T) {
			if _, err := write("x.sh", "#!/bin/sh", bothy.WriteOptions{Mode: 0o755 | fs.ModeSetuid}); err != nil {
				t.Fatal(err)
			}
			fi, err := e.fs.Stat(e.ctx, e.tenant, e.computer, "x.sh")
			if err != nil || fi.Mode != 0o755 {
				t.Fatalf("mode %v, %v", fi.Mode, err)
			}
		})
		t.Run("Stream", func(t *testing.T) {
			pr, pw := io.Pipe()
			go func() {
				for range 100 {
					pw.Write(bytes.Repeat([]byte("abcdefgh"), 1000))
				}
				pw.Close()
			}()
			if _, err := e.fs.WriteFile(e.ctx, e.tenant, e.computer, "stream", pr, bothy.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			if got := e.read("stream"); got != strings.Repeat("abcdefgh", 100000) {
				t.Fatalf("stream: %d bytes", len(got))
			}
		})
		t.Run("MkdirParents", func(t *testing.T) {
			if _, err := write("p/q/r.txt", "r", bothy.WriteOptions{MkdirParents: true}); err != nil {
				t.Fatal(err)
			}
			fi, err := e.fs.Stat(e.ctx, e.tenant, e.computer, "p/q")
			if err != nil || fi.Type != bothy.FileTypeDir || fi.Mode != 0o755 {
				t.Fatalf("parent %+v, %v", fi, err)
			}
		})
		t.Run("Exclusive", func(t *testing.T) {
			if _, err := write("new", "n", bothy.WriteOptions{Exclusive: true}); err != nil {
				t.Fatal(err)
			}
			e.unchanged(bothy.ECONFLICT, func() error {
				_, err := write("new", "again", bothy.WriteOptions{Exclusive: true})
				return err
			})
			e.symlink("nowhere", "dangling")
			e.unchanged(bothy.ECONFLICT, func() error {
				_, err := write("dangling", "x", bothy.WriteOptions{Exclusive: true})
				return err
			})
			if e.read("new") != "n" {
				t.Fatal("exclusive write replaced the file")
			}
		})
		t.Run("ThroughSymlink", func(t *testing.T) {
			e.symlink("p/q/r.txt", "rlink")
			if _, err := write("rlink", "via link", bothy.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			if e.read("p/q/r.txt") != "via link" {
				t.Fatal("write did not follow the link")
			}
			fi, _ := e.fs.Lstat(e.ctx, e.tenant, e.computer, "rlink")
			if fi.Type != bothy.FileTypeSymlink {
				t.Fatal("write replaced the link")
			}
			// A dangling link inside the workspace creates its target.
			e.symlink("p/made", "mlink")
			if _, err := write("mlink", "made", bothy.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			if e.read("p/made") != "made" {
				t.Fatal("write through a dangling link")
			}
		})
		t.Run("ErrParentMissing", func(t *testing.T) {
			e.unchanged(bothy.ENOTFOUND, func() error {
				_, err := write("nope/f", "x", bothy.WriteOptions{})
				return err
			})
		})
		t.Run("ErrParentIsFile", func(t *testing.T) {
			e.unchanged(bothy.ENOTDIR, func() error {
				_, err := write("f.txt/g", "x", bothy.WriteOptions{MkdirParents: true})
				return err
			})
		})
		t.Run("ErrIsDir", func(t *testing.T) {
			e.unchanged(bothy.EISDIR, func() error {
				_, err := write("p", "x", bothy.WriteOptions{})
				return err
			})
			e.unchanged(bothy.EISDIR, func() error {
				_, err := write("/", "x", bothy.WriteOptions{})
				return err
			})
		})
	})
}

func TestFS_WriteFile_TooLarge(t *testing.T) {
	runOpts(t, workspace.Options{MaxFileSize: 1000}, func(t *testing.T, e *env) {
		if _, err := e.fs.WriteFile(e.ctx, e.tenant, e.computer, "ok", bytes.NewReader(make([]byte, 1000)), bothy.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.unchanged(bothy.ETOOLARGE, func() error {
			_, err := e.fs.WriteFile(e.ctx, e.tenant, e.computer, "big", bytes.NewReader(make([]byte, 1001)), bothy.WriteOptions{})
			return err
		})
		// An endless stream is refused without reading it all.
		e.unchanged(bothy.ETOOLARGE, func() error {
			_, err := e.fs.WriteFile(e.ctx, e.tenant, e.computer, "big", endless{}, bothy.WriteOptions{})
			return err
		})
		e.unchanged(bothy.ETOOLARGE, func() error {
			_, err := e.fs.Apply(e.ctx, e.tenant, e.computer, []bothy.FileOp{{Op: "write", Path: "big", Data: make([]byte, 1001)}})
			return err
		})
		if e.exists("big") {
			t.Fatal("oversized file exists")
		}
	})
}

type endless struct{}

func (endless) Read(p []byte) (int, error) { return len(p), nil }

func TestFS_Mkdir(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		mkdir := func(p string, opts bothy.MkdirOptions) (*bothy.Revision, error) {
			return e.fs.Mkdir(e.ctx, e.tenant, e.computer, p, opts)
		}
		t.Run("OK", func(t *testing.T) {
			rev, err := mkdir("d", bothy.MkdirOptions{Mode: 0o700})
			if err != nil || rev.Number != 1 || rev.CreatedBy != "api:mkdir" {
				t.Fatalf("mkdir: %+v, %v", rev, err)
			}
			fi, err := e.fs.Stat(e.ctx, e.tenant, e.computer, "d")
			if err != nil || fi.Type != bothy.FileTypeDir || fi.Mode != 0o700 {
				t.Fatalf("stat: %+v, %v", fi, err)
			}
			// An empty directory survives.
			list, err := e.fs.ReadDir(e.ctx, e.tenant, e.computer, "d", bothy.ReadDirOptions{})
			if err != nil || len(list) != 0 {
				t.Fatalf("read dir: %v, %v", list, err)
			}
		})
		t.Run("Parents", func(t *testing.T) {
			if _, err := mkdir("a/b/c", bothy.MkdirOptions{Parents: true}); err != nil {
				t.Fatal(err)
			}
			if !e.exists("a/b/c") {
				t.Fatal("missing")
			}
		})
		t.Run("ParentsExisting", func(t *testing.T) {
			before := e.rev()
			for _, p := range []string{"a/b", "/", "d"} {
				rev, err := mkdir(p, bothy.MkdirOptions{Parents: true})
				if err != nil || rev.Number != before {
					t.Fatalf("mkdir -p %q of an existing dir: %+v, %v", p, rev, err)
				}
			}
			e.symlink("a", "alink")
			if _, err := mkdir("alink", bothy.MkdirOptions{Parents: true}); err != nil {
				t.Fatal(err)
			}
		})
		t.Run("ErrExists", func(t *testing.T) {
			e.unchanged(bothy.ECONFLICT, func() error { _, err := mkdir("d", bothy.MkdirOptions{}); return err })
			e.unchanged(bothy.ECONFLICT, func() error { _, err := mkdir("alink", bothy.MkdirOptions{}); return err })
			e.unchanged(bothy.ECONFLICT, func() error { _, err := mkdir("/", bothy.MkdirOptions{}); return err })
		})
		t.Run("ErrParentMissing", func(t *testing.T) {
			e.unchanged(bothy.ENOTFOUND, func() error { _, err := mkdir("x/y", bothy.MkdirOptions{}); return err })
		})
		t.Run("ErrNotDir", func(t *testing.T) {
			e.write("file", "f")
			e.unchanged(bothy.ENOTDIR, func() error { _, err := mkdir("file", bothy.MkdirOptions{Parents: true}); return err })
			e.unchanged(bothy.ENOTDIR, func() error { _, err := mkdir("file/x", bothy.MkdirOptions{Parents: true}); return err })
		})
	})
}

func TestFS_Remove(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		rm := func(p string, opts bothy.RemoveOptions) (*bothy.Revision, error) {
			return e.fs.Remove(e.ctx, e.tenant, e.computer, p, opts)
		}
		e.write("f", "12345")
		e.write("d/x", "1")
		e.write("d/sub/y", "22")
		e.mkdir("empty")
		t.Run("File", func(t *testing.T) {
			before := e.rev()
			rev, err := rm("f", bothy.RemoveOptions{})
			if err != nil || rev.Number != before+1 || rev.CreatedBy != "api:rm" || rev.FileCount != 2 || rev.Size != 3 {
				t.Fatalf("rm: %+v, %v", rev, err)
			}
			if e.exists("f") {
				t.Fatal("still there")
			}
		})
		t.Run("EmptyDir", func(t *testing.T) {
			if _, err := rm("empty", bothy.RemoveOptions{}); err != nil {
				t.Fatal(err)
			}
		})
		t.Run("ErrNotEmpty", func(t *testing.T) {
			e.unchanged(bothy.ENOTEMPTY, func() error { _, err := rm("d", bothy.RemoveOptions{}); return err })
		})
		t.Run("Symlink", func(t *testing.T) {
			e.symlink("d", "dlink")
			if _, err := rm("dlink", bothy.RemoveOptions{}); err != nil {
				t.Fatal(err)
			}
			if e.exists("dlink") || !e.exists("d/x") {
				t.Fatal("rm of a link must remove the link only")
			}
		})
		t.Run("Recursive", func(t *testing.T) {
			rev, err := rm("d", bothy.RemoveOptions{Recursive: true})
			if err != nil || rev.FileCount != 0 || rev.Size != 0 {
				t.Fatalf("rm -r: %+v, %v", rev, err)
			}
			if e.exists("d") {
				t.Fatal("still there")
			}
		})
		t.Run("Force", func(t *testing.T) {
			before := e.rev()
			for _, p := range []string{"nope", "nope/deeper"} {
				rev, err := rm(p, bothy.RemoveOptions{Force: true})
				if err != nil || rev.Number != before || e.rev() != before {
					t.Fatalf("rm -f %q: %+v, %v", p, rev, err)
				}
			}
		})
		t.Run("ErrNotFound", func(t *testing.T) {
			e.unchanged(bothy.ENOTFOUND, func() error { _, err := rm("nope", bothy.RemoveOptions{}); return err })
		})
		t.Run("ErrRoot", func(t *testing.T) {
			e.unchanged(bothy.EINVALID, func() error {
				_, err := rm("/", bothy.RemoveOptions{Recursive: true, Force: true})
				return err
			})
			e.unchanged(bothy.EINVALID, func() error { _, err := rm("a/..", bothy.RemoveOptions{Recursive: true}); return err })
		})
	})
}

func TestFS_Rename(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		mv := func(from, to string) (*bothy.Revision, error) {
			return e.fs.Rename(e.ctx, e.tenant, e.computer, from, to)
		}
		e.write("a", "A")
		e.write("b", "B")
		e.write("d/x", "X")
		e.write("full/y", "Y")
		e.mkdir("empty")
		t.Run("File", func(t *testing.T) {
			rev, err := mv("a", "d/a2")
			if err != nil || rev.CreatedBy != "api:rename" || rev.FileCount != 4 {
				t.Fatalf("rename: %+v, %v", rev, err)
			}
			if e.exists("a") || e.read("d/a2") != "A" {
				t.Fatal("not moved")
			}
		})
		t.Run("ReplaceFile", func(t *testing.T) {
			rev, err := mv("d/a2", "b")
			if err != nil || rev.FileCount != 3 || rev.Size != 3 {
				t.Fatalf("rename: %+v, %v", rev, err)
			}
			if e.read("b") != "A" || e.exists("d/a2") {
				t.Fatal("not replaced")
			}
		})
		t.Run("Dir", func(t *testing.T) {
			if _, err := mv("d", "e/../d2"); err != nil {
				t.Fatal(err)
			}
			if e.exists("d") || e.read("d2/x") != "X" {
				t.Fatal("not moved")
			}
		})
		t.Run("DirOntoEmptyDir", func(t *testing.T) {
			if _, err := mv("d2", "empty"); err != nil {
				t.Fatal(err)
			}
			if e.read("empty/x") != "X" || e.exists("d2") {
				t.Fatal("not moved")
			}
		})
		t.Run("Symlink", func(t *testing.T) {
			e.symlink("empty", "link")
			if _, err := mv("link", "link2"); err != nil {
				t.Fatal(err)
			}
			if target, err := e.fs.Readlink(e.ctx, e.tenant, e.computer, "link2"); err != nil || target != "empty" || !e.exists("empty/x") {
				t.Fatalf("rename moved the link's target? %q, %v", target, err)
			}
		})
		t.Run("Same", func(t *testing.T) {
			before := e.rev()
			if rev, err := mv("b", "./b"); err != nil || rev.Number != before {
				t.Fatalf("rename to itself: %+v, %v", rev, err)
			}
		})
		t.Run("ErrNotEmpty", func(t *testing.T) {
			e.unchanged(bothy.ENOTEMPTY, func() error { _, err := mv("empty", "full"); return err })
		})
		t.Run("ErrIsDir", func(t *testing.T) {
			e.unchanged(bothy.EISDIR, func() error { _, err := mv("b", "full"); return err })
		})
		t.Run("ErrNotDir", func(t *testing.T) {
			e.unchanged(bothy.ENOTDIR, func() error { _, err := mv("full", "b"); return err })
		})
		t.Run("ErrIntoItself", func(t *testing.T) {
			e.unchanged(bothy.EINVALID, func() error { _, err := mv("full", "full/sub"); return err })
			e.symlink("full", "fl")
			e.unchanged(bothy.EINVALID, func() error { _, err := mv("full", "fl/sub"); return err })
		})
		t.Run("ErrRoot", func(t *testing.T) {
			e.unchanged(bothy.EINVALID, func() error { _, err := mv("/", "x"); return err })
			e.unchanged(bothy.EINVALID, func() error { _, err := mv("b", "/"); return err })
		})
		t.Run("ErrNotFound", func(t *testing.T) {
			e.unchanged(bothy.ENOTFOUND, func() error { _, err := mv("nope", "x"); return err })
			e.unchanged(bothy.ENOTFOUND, func() error { _, err := mv("b", "nope/x"); return err })
		})
	})
}

func TestFS_Symlink(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		ln := func(target, p string) (*bothy.Revision, error) {
			return e.fs.Symlink(e.ctx, e.tenant, e.computer, target, p)
		}
		t.Run("OK", func(t *testing.T) {
			for _, target := range []string{"../../x", "/etc/passwd", "dangling"} {
				rev, err := ln(target, "l-"+strings.ReplaceAll(target, "/", "_"))
				if err != nil || rev.CreatedBy != "api:symlink" {
					t.Fatalf("symlink %q: %+v, %v", target, rev, err)
				}
				got, err := e.fs.Readlink(e.ctx, e.tenant, e.computer, "l-"+strings.ReplaceAll(target, "/", "_"))
				if err != nil || got != target {
					t.Fatalf("readlink: %q, %v", got, err)
				}
			}
		})
		t.Run("ErrExists", func(t *testing.T) {
			e.unchanged(bothy.ECONFLICT, func() error { _, err := ln("x", "l-dangling"); return err })
			e.unchanged(bothy.ECONFLICT, func() error { _, err := ln("x", "/"); return err })
		})
		t.Run("ErrTarget", func(t *testing.T) {
			e.unchanged(bothy.EINVALID, func() error { _, err := ln("", "l"); return err })
			e.unchanged(bothy.EINVALID, func() error { _, err := ln("a\x00b", "l"); return err })
		})
		t.Run("ErrParentMissing", func(t *testing.T) {
			e.unchanged(bothy.ENOTFOUND, func() error { _, err := ln("x", "nope/l"); return err })
		})
	})
}

func TestFS_Chmod(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		e.write("d/f", "x")
		e.symlink("d/f", "link")
		t.Run("OK", func(t *testing.T) {
			rev, err := e.fs.Chmod(e.ctx, e.tenant, e.computer, "link", 0o4750)
			if err != nil || rev.CreatedBy != "api:chmod" {
				t.Fatalf("chmod: %+v, %v", rev, err)
			}
			fi, _ := e.fs.Stat(e.ctx, e.tenant, e.computer, "d/f")
			if fi.Mode != 0o750 {
				t.Fatalf("mode %v", fi.Mode)
			}
			if _, err := e.fs.Chmod(e.ctx, e.tenant, e.computer, "d", 0o700); err != nil {
				t.Fatal(err)
			}
			if e.read("d/f") != "x" {
				t.Fatal("chmod of a dir lost its content")
			}
		})
		t.Run("Unchanged", func(t *testing.T) {
			before := e.rev()
			if rev, err := e.fs.Chmod(e.ctx, e.tenant, e.computer, "d/f", 0o750); err != nil || rev.Number != before {
				t.Fatalf("chmod to the same mode: %+v, %v", rev, err)
			}
		})
		t.Run("ErrNotFound", func(t *testing.T) {
			e.unchanged(bothy.ENOTFOUND, func() error { _, err := e.fs.Chmod(e.ctx, e.tenant, e.computer, "nope", 0o644); return err })
		})
		t.Run("ErrRoot", func(t *testing.T) {
			e.unchanged(bothy.EINVALID, func() error { _, err := e.fs.Chmod(e.ctx, e.tenant, e.computer, "/", 0o700); return err })
		})
	})
}

func TestFS_Apply(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		t.Run("OK", func(t *testing.T) {
			rev, err := e.fs.Apply(e.ctx, e.tenant, e.computer, []bothy.FileOp{
				{Op: "mkdir", Path: "src/pkg", Parents: true},
				{Op: "write", Path: "src/pkg/a.go", Data: []byte("package pkg")},
				{Op: "write", Path: "tmp/scratch", Data: []byte("scratch"), Parents: true},
				{Op: "symlink", Path: "latest", Target: "src/pkg/a.go"},
				{Op: "rename", Path: "src/pkg/a.go", To: "src/pkg/b.go"},
				{Op: "chmod", Path: "src/pkg/b.go", Mode: 0o600},
				{Op: "rm", Path: "tmp", Recursive: true},
			})
			if err != nil {
				t.Fatal(err)
			} else if rev.Number != 1 || e.rev() != 1 || rev.CreatedBy != "api:apply" || rev.FileCount != 1 {
				t.Fatalf("batch revision %+v", rev)
			}
			fi, err := e.fs.Stat(e.ctx, e.tenant, e.computer, "src/pkg/b.go")
			if err != nil || fi.Mode != 0o600 || e.read("src/pkg/b.go") != "package pkg" || e.exists("tmp") {
				t.Fatalf("batch result: %+v, %v", fi, err)
			}
		})
		t.Run("ErrAtomic", func(t *testing.T) {
			before := e.rev()
			_, err := e.fs.Apply(e.ctx, e.tenant, e.computer, []bothy.FileOp{
				{Op: "write", Path: "new", Data: []byte("x")},
				{Op: "rm", Path: "missing"},
			})
			storetest.WantCode(t, err, bothy.ENOTFOUND)
			if !strings.Contains(bothy.ErrorMessage(err), "op 1") {
				t.Fatalf("error does not name the op: %v", err)
			}
			if e.rev() != before || e.exists("new") {
				t.Fatal("a failed batch committed")
			}
		})
		t.Run("ErrInvalid", func(t *testing.T) {
			e.unchanged(bothy.EINVALID, func() error { _, err := e.fs.Apply(e.ctx, e.tenant, e.computer, nil); return err })
			e.unchanged(bothy.EINVALID, func() error {
				_, err := e.fs.Apply(e.ctx, e.tenant, e.computer, []bothy.FileOp{{Op: "chown", Path: "x"}})
				return err
			})
			e.unchanged(bothy.EINVALIDPATH, func() error {
				_, err := e.fs.Apply(e.ctx, e.tenant, e.computer, []bothy.FileOp{{Op: "write", Path: "ok"}, {Op: "rename", Path: "ok", To: "../x"}})
				return err
			})
		})
	})
}

func TestFS_Apply_TooMany(t *testing.T) {
	runOpts(t, workspace.Options{MaxBatch: 2}, func(t *testing.T, e *env) {
		ops := []bothy.FileOp{{Op: "mkdir", Path: "a"}, {Op: "mkdir", Path: "b"}, {Op: "mkdir", Path: "c"}}
		e.unchanged(bothy.ETOOLARGE, func() error { _, err := e.fs.Apply(e.ctx, e.tenant, e.computer, ops); return err })
		if _, err := e.fs.Apply(e.ctx, e.tenant, e.computer, ops[:2]); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFS_OneRevisionPerOp checks that every kind of mutation commits
// exactly one revision, on top of the previous one.
func TestFS_OneRevisionPerOp(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		ops := []func() (*bothy.Revision, error){
			func() (*bothy.Revision, error) {
				return e.fs.WriteFile(e.ctx, e.tenant, e.computer, "f", strings.NewReader("x"), bothy.WriteOptions{})
			},
			func() (*bothy.Revision, error) {
				return e.fs.Mkdir(e.ctx, e.tenant, e.computer, "d", bothy.MkdirOptions{})
			},
			func() (*bothy.Revision, error) { return e.fs.Symlink(e.ctx, e.tenant, e.computer, "f", "l") },
			func() (*bothy.Revision, error) { return e.fs.Chmod(e.ctx, e.tenant, e.computer, "f", 0o700) },
			func() (*bothy.Revision, error) { return e.fs.Rename(e.ctx, e.tenant, e.computer, "f", "d/f") },
			func() (*bothy.Revision, error) {
				return e.fs.Remove(e.ctx, e.tenant, e.computer, "d", bothy.RemoveOptions{Recursive: true})
			},
			func() (*bothy.Revision, error) {
				return e.fs.Apply(e.ctx, e.tenant, e.computer, []bothy.FileOp{{Op: "write", Path: "a", Data: []byte("a")}, {Op: "write", Path: "b"}})
			},
		}
		for i, op := range ops {
			rev, err := op()
			if err != nil {
				t.Fatalf("op %d: %v", i, err)
			} else if rev.Number != int64(i+1) || rev.Parent != int64(i) || e.rev() != int64(i+1) {
				t.Fatalf("op %d: revision %d (parent %d), computer at %d", i, rev.Number, rev.Parent, e.rev())
			}
		}
		revs, err := e.store.ListRevisions(e.ctx, e.tenant, e.computer, 0, 100)
		if err != nil || len(revs) != len(ops) {
			t.Fatalf("%d revisions, %v", len(revs), err)
		}
	})
}

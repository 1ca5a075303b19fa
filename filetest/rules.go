package filetest

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/storetest"
)

// testPaths checks the path rules every method shares.
func testPaths(t *testing.T, open opener) {
	t.Run("OK", func(t *testing.T) {
		f := open(t)
		f.write("./a//b/", "x")
		for _, p := range []string{"a/b", "/a/b", "a/../a/b", "./a/./b"} {
			if fi := f.stat(p); fi.Path != "a/b" {
				t.Errorf("Stat(%q).Path = %q, want a/b", p, fi.Path)
			}
		}
		// Symlinks in the middle of a path are followed while inside.
		f.symlink("a", "link")
		if fi := f.stat("link/b"); fi.Type != bothy.FileTypeFile {
			t.Errorf("Stat(link/b) = %+v", fi)
		}
	})
	t.Run("ErrInvalidPath", func(t *testing.T) {
		f := open(t)
		f.write("dir/f", "x")
		f.symlink("/etc", "abs")
		f.symlink("../..", "up")
		f.symlink("loop2", "loop1")
		f.symlink("loop1", "loop2")
		bad := []string{
			"..", "../x", "dir/../../x", "a\x00b",
			strings.Repeat("n", 256),
			strings.Repeat("abcdefg/", 4096/8) + "x",
			"abs/passwd", "up/x", "loop1", "loop1/x",
		}
		for _, p := range bad {
			ctx, tn, id := f.ctx, f.TenantID, f.id
			_, _, err := f.Files.ReadFile(ctx, tn, id, p, 0, -1)
			wantCodeOf(t, "ReadFile", p, err, bothy.EINVALIDPATH)
			_, err = f.Files.Stat(ctx, tn, id, p)
			wantCodeOf(t, "Stat", p, err, bothy.EINVALIDPATH)
			_, err = f.Files.WriteFile(ctx, tn, id, p, strings.NewReader("y"), bothy.WriteOptions{MkdirParents: true})
			wantCodeOf(t, "WriteFile", p, err, bothy.EINVALIDPATH)
			_, err = f.Files.Mkdir(ctx, tn, id, p+"/d", bothy.MkdirOptions{Parents: true})
			wantCodeOf(t, "Mkdir", p, err, bothy.EINVALIDPATH)
		}
		if f.current() != 5 {
			t.Error("a refused path committed")
		}
	})
	t.Run("ErrNotDir", func(t *testing.T) {
		f := open(t)
		f.write("f", "x")
		_, err := f.Files.ReadDir(f.ctx, f.TenantID, f.id, "f/sub", bothy.ReadDirOptions{})
		storetest.WantCode(t, err, bothy.ENOTDIR)
		_, err = f.Files.Mkdir(f.ctx, f.TenantID, f.id, "f/sub", bothy.MkdirOptions{Parents: true})
		storetest.WantCode(t, err, bothy.ENOTDIR)
	})
}

// testNotFound checks that every method refuses a computer that does not
// exist, or is another tenant's, as ENOTFOUND.
func testNotFound(t *testing.T, open opener) {
	f := open(t)
	f.write("f", "x")
	for _, c := range []struct {
		name, tenantID, id string
		fs                 bothy.FileService
	}{
		{"MissingComputer", f.TenantID, "cmp_missing", f.Files},
		{"OtherTenant", f.OtherTenantID, f.id, f.Other},
	} {
		t.Run(c.name, func(t *testing.T) {
			for name, call := range allMethods(f, c.fs, c.tenantID, c.id) {
				wantCodeOf(t, name, "", call(), bothy.ENOTFOUND)
			}
		})
	}
	if got := f.read("f"); got != "x" || f.current() != 1 {
		t.Errorf("another tenant's calls changed the computer: %q, revision %d", got, f.current())
	}
}

// allMethods returns a call of every method, for the computer id of
// tenantID, on paths that exist in the fixture's computer.
func allMethods(f *fixture, fs bothy.FileService, tenantID, id string) map[string]func() error {
	ctx := f.ctx
	return map[string]func() error{
		"ReadFile": func() error {
			rc, _, err := fs.ReadFile(ctx, tenantID, id, "f", 0, -1)
			if err == nil {
				io.Copy(io.Discard, rc)
				rc.Close()
			}
			return err
		},
		"WriteFile": func() error {
			_, err := fs.WriteFile(ctx, tenantID, id, "f", strings.NewReader("y"), bothy.WriteOptions{})
			return err
		},
		"Stat":     func() error { _, err := fs.Stat(ctx, tenantID, id, "f"); return err },
		"Lstat":    func() error { _, err := fs.Lstat(ctx, tenantID, id, "f"); return err },
		"ReadDir":  func() error { _, err := fs.ReadDir(ctx, tenantID, id, "", bothy.ReadDirOptions{}); return err },
		"Glob":     func() error { _, err := fs.Glob(ctx, tenantID, id, "*", 0); return err },
		"Grep":     func() error { _, err := fs.Grep(ctx, tenantID, id, bothy.GrepOptions{Pattern: "x"}); return err },
		"Mkdir":    func() error { _, err := fs.Mkdir(ctx, tenantID, id, "d", bothy.MkdirOptions{}); return err },
		"Remove":   func() error { _, err := fs.Remove(ctx, tenantID, id, "f", bothy.RemoveOptions{}); return err },
		"Rename":   func() error { _, err := fs.Rename(ctx, tenantID, id, "f", "g"); return err },
		"Symlink":  func() error { _, err := fs.Symlink(ctx, tenantID, id, "f", "l"); return err },
		"Readlink": func() error { _, err := fs.Readlink(ctx, tenantID, id, "f"); return err },
		"Chmod":    func() error { _, err := fs.Chmod(ctx, tenantID, id, "f", 0o600); return err },
		"Apply": func() error {
			_, err := fs.Apply(ctx, tenantID, id, []bothy.FileOp{{Op: bothy.FileOpMkdir, Path: "d"}})
			return err
		},
	}
}

// testRevisions checks that each successful mutation commits one revision,
// a mutation that changes nothing commits none, and a failed one none.
func testRevisions(t *testing.T, open opener) {
	f := open(t)
	ctx, tn, id := f.ctx, f.TenantID, f.id
	f.wantRevision(f.write("f", "x"), 1)
	f.wantRevision(f.symlink("f", "l"), 2)
	f.wantRevision(f.mkdir("d/e"), 3)
	steps := []struct {
		name string
		do   func() (*bothy.Revision, error)
		want int64 // the revision returned; 0: an error, and nothing committed
	}{
		{"chmod", func() (*bothy.Revision, error) { return f.Files.Chmod(ctx, tn, id, "f", 0o600) }, 4},
		{"chmod to the same mode", func() (*bothy.Revision, error) { return f.Files.Chmod(ctx, tn, id, "f", 0o600) }, 4},
		{"rename", func() (*bothy.Revision, error) { return f.Files.Rename(ctx, tn, id, "f", "d/f") }, 5},
		{"mkdir -p of a directory", func() (*bothy.Revision, error) {
			return f.Files.Mkdir(ctx, tn, id, "d/e", bothy.MkdirOptions{Parents: true})
		}, 5},
		{"rm -f of a missing path", func() (*bothy.Revision, error) {
			return f.Files.Remove(ctx, tn, id, "nothing", bothy.RemoveOptions{Force: true})
		}, 5},
		{"failed mkdir", func() (*bothy.Revision, error) { return f.Files.Mkdir(ctx, tn, id, "d", bothy.MkdirOptions{}) }, 0},
		{"failed rename", func() (*bothy.Revision, error) { return f.Files.Rename(ctx, tn, id, "nothing", "x") }, 0},
		{"remove", func() (*bothy.Revision, error) { return f.Files.Remove(ctx, tn, id, "l", bothy.RemoveOptions{}) }, 6},
		{"apply", func() (*bothy.Revision, error) {
			return f.Files.Apply(ctx, tn, id, []bothy.FileOp{{Op: bothy.FileOpWrite, Path: "a"}, {Op: bothy.FileOpWrite, Path: "b"}})
		}, 7},
	}
	for _, s := range steps {
		rev, err := s.do()
		if s.want == 0 {
			if err == nil {
				t.Fatalf("%s: no error", s.name)
			}
			continue
		} else if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if rev.Number != s.want || rev.ComputerID != id {
			t.Fatalf("%s: revision %+v, want %d", s.name, rev, s.want)
		}
	}
	if n := f.current(); n != 7 {
		t.Fatalf("current revision %d, want 7", n)
	}
}

// testConcurrent checks that concurrent mutations are serialised: each
// either commits its own revision or is ECONFLICT, and none is lost.
func testConcurrent(t *testing.T, open opener) {
	f := open(t)
	const n = 4
	revs, errs := make([]*bothy.Revision, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			revs[i], errs[i] = f.Files.WriteFile(f.ctx, f.TenantID, f.id, fmt.Sprintf("f%d", i), strings.NewReader("x"), bothy.WriteOptions{})
		}()
	}
	wg.Wait()
	seen := map[int64]bool{}
	for i := range n {
		p := fmt.Sprintf("f%d", i)
		if bothy.ErrorCode(errs[i]) == bothy.ECONFLICT {
			f.missing(p)
			continue
		} else if errs[i] != nil {
			t.Fatalf("write %s: %v", p, errs[i])
		}
		if seen[revs[i].Number] {
			t.Fatalf("two writes returned revision %d", revs[i].Number)
		}
		seen[revs[i].Number] = true
		if got := f.read(p); got != "x" {
			t.Errorf("%s holds %q: a committed write was lost", p, got)
		}
	}
	if len(seen) == 0 {
		t.Fatal("every concurrent write lost")
	} else if cur := f.current(); cur != int64(len(seen)) {
		t.Fatalf("current revision %d after %d successful writes", cur, len(seen))
	}
}

// wantCodeOf is wantCode naming the call, going on after a mismatch.
func wantCodeOf(t *testing.T, call, path string, err error, code string) {
	t.Helper()
	if got := bothy.ErrorCode(err); got != code {
		t.Errorf("%s(%.40q): error code %q, want %q (err: %v)", call, path, got, code, err)
	}
}

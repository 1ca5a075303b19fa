package workspace_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/storetest"
)

func TestFS_ReadFile(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		t.Run("OK", func(t *testing.T) {
			e.write("/a/b.txt", "hello world")
			if got := e.read("a/b.txt"); got != "hello world" {
				t.Fatalf("read %q", got)
			}
			rc, fi, err := e.fs.ReadFile(e.ctx, e.tenant, e.computer, "./a//b.txt", 6, 3)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if string(b) != "wor" || fi.Path != "a/b.txt" || fi.Name != "b.txt" || fi.Size != 11 || fi.Type != bothy.FileTypeFile || fi.Mode != 0o644 || fi.ModTime.IsZero() {
				t.Fatalf("read range %q, info %+v", b, fi)
			}
		})
		t.Run("PastEnd", func(t *testing.T) {
			if b, err := e.readErr("a/b.txt", 11, -1); err != nil || len(b) != 0 {
				t.Fatalf("read at end: %q, %v", b, err)
			}
			if b, err := e.readErr("a/b.txt", 100, 5); err != nil || len(b) != 0 {
				t.Fatalf("read past end: %q, %v", b, err)
			}
			if b, err := e.readErr("a/b.txt", 8, 100); err != nil || string(b) != "rld" {
				t.Fatalf("read over end: %q, %v", b, err)
			}
		})
		t.Run("EmptyFile", func(t *testing.T) {
			e.write("empty", "")
			if got := e.read("empty"); got != "" {
				t.Fatalf("read %q", got)
			}
		})
		t.Run("ErrNotFound", func(t *testing.T) {
			_, err := e.readErr("a/nope", 0, -1)
			storetest.WantCode(t, err, bothy.ENOTFOUND)
			_, err = e.readErr("nope/x", 0, -1)
			storetest.WantCode(t, err, bothy.ENOTFOUND)
		})
		t.Run("ErrIsDir", func(t *testing.T) {
			_, err := e.readErr("a", 0, -1)
			storetest.WantCode(t, err, bothy.EISDIR)
			_, err = e.readErr("/", 0, -1)
			storetest.WantCode(t, err, bothy.EISDIR)
		})
		t.Run("ErrNotDir", func(t *testing.T) {
			_, err := e.readErr("a/b.txt/c", 0, -1)
			storetest.WantCode(t, err, bothy.ENOTDIR)
		})
		t.Run("ErrNegativeOffset", func(t *testing.T) {
			_, err := e.readErr("a/b.txt", -1, 1)
			storetest.WantCode(t, err, bothy.EINVALID)
		})
		t.Run("EmptyWorkspace", func(t *testing.T) {
			other := e.newComputer(e.tenant)
			_, _, err := e.fs.ReadFile(e.ctx, e.tenant, other, "x", 0, -1)
			storetest.WantCode(t, err, bothy.ENOTFOUND)
			list, err := e.fs.ReadDir(e.ctx, e.tenant, other, "/", bothy.ReadDirOptions{})
			if err != nil || len(list) != 0 {
				t.Fatalf("read dir of an empty workspace: %v, %v", list, err)
			}
		})
	})
}

// TestFS_ReadFile_Range reads ranges of a file of several content-defined
// chunks, across chunk boundaries.
func TestFS_ReadFile_Range(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		data := make([]byte, 5<<20)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		if _, err := e.fs.WriteFile(e.ctx, e.tenant, e.computer, "big.bin", bytes.NewReader(data), bothy.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if n := e.chunks("big.bin"); n < 2 {
			t.Fatalf("a 5 MiB file has %d chunks; the test needs several", n)
		}
		whole, err := e.readErr("big.bin", 0, -1)
		if err != nil || !bytes.Equal(whole, data) {
			t.Fatalf("whole read: %d bytes, %v", len(whole), err)
		}
		ranges := [][2]int64{{0, 1}, {1<<20 - 7, 3 << 20}, {2<<20 + 12345, 1 << 20}, {int64(len(data)) - 10, -1}, {4 << 20, 1}}
		for range 12 {
			off := rng.Int64N(int64(len(data)))
			ranges = append(ranges, [2]int64{off, rng.Int64N(2 << 20)})
		}
		for _, r := range ranges {
			got, err := e.readErr("big.bin", r[0], r[1])
			end := int64(len(data))
			if r[1] >= 0 {
				end = min(end, r[0]+r[1])
			}
			if err != nil || !bytes.Equal(got, data[r[0]:end]) {
				t.Fatalf("read [%d,+%d): %d bytes, %v", r[0], r[1], len(got), err)
			}
		}
	})
}

func TestFS_Stat(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		e.write("d/f", "12345")
		e.symlink("f", "d/link")
		e.symlink("d", "dlink")
		t.Run("File", func(t *testing.T) {
			fi, err := e.fs.Stat(e.ctx, e.tenant, e.computer, "/d/f")
			if err != nil || fi.Type != bothy.FileTypeFile || fi.Size != 5 || fi.Path != "d/f" {
				t.Fatalf("stat: %+v, %v", fi, err)
			}
		})
		t.Run("Root", func(t *testing.T) {
			fi, err := e.fs.Stat(e.ctx, e.tenant, e.computer, "")
			if err != nil || fi.Type != bothy.FileTypeDir || fi.Path != "." {
				t.Fatalf("stat root: %+v, %v", fi, err)
			}
		})
		t.Run("FollowsSymlink", func(t *testing.T) {
			fi, err := e.fs.Stat(e.ctx, e.tenant, e.computer, "d/link")
			if err != nil || fi.Type != bothy.FileTypeFile || fi.Size != 5 || fi.Path != "d/link" {
				t.Fatalf("stat: %+v, %v", fi, err)
			}
			fi, err = e.fs.Stat(e.ctx, e.tenant, e.computer, "dlink/link")
			if err != nil || fi.Type != bothy.FileTypeFile {
				t.Fatalf("stat through two links: %+v, %v", fi, err)
			}
			if got := e.read("dlink/link"); got != "12345" {
				t.Fatalf("read through links: %q", got)
			}
		})
		t.Run("Lstat", func(t *testing.T) {
			fi, err := e.fs.Lstat(e.ctx, e.tenant, e.computer, "d/link")
			if err != nil || fi.Type != bothy.FileTypeSymlink || fi.Target != "f" || fi.Size != 1 || fi.Mode != 0o777 {
				t.Fatalf("lstat: %+v, %v", fi, err)
			}
			fi, err = e.fs.Lstat(e.ctx, e.tenant, e.computer, "dlink")
			if err != nil || fi.Type != bothy.FileTypeSymlink {
				t.Fatalf("lstat dir link: %+v, %v", fi, err)
			}
		})
		t.Run("Dir", func(t *testing.T) {
			fi, err := e.fs.Stat(e.ctx, e.tenant, e.computer, "dlink")
			if err != nil || fi.Type != bothy.FileTypeDir || fi.Mode != 0o755 {
				t.Fatalf("stat dir: %+v, %v", fi, err)
			}
		})
		t.Run("ErrNotFound", func(t *testing.T) {
			_, err := e.fs.Stat(e.ctx, e.tenant, e.computer, "d/nope")
			storetest.WantCode(t, err, bothy.ENOTFOUND)
			e.symlink("nope", "dangling")
			_, err = e.fs.Stat(e.ctx, e.tenant, e.computer, "dangling")
			storetest.WantCode(t, err, bothy.ENOTFOUND)
			if _, err := e.fs.Lstat(e.ctx, e.tenant, e.computer, "dangling"); err != nil {
				t.Fatal(err)
			}
		})
		t.Run("Readlink", func(t *testing.T) {
			target, err := e.fs.Readlink(e.ctx, e.tenant, e.computer, "dlink")
			if err != nil || target != "d" {
				t.Fatalf("readlink: %q, %v", target, err)
			}
			_, err = e.fs.Readlink(e.ctx, e.tenant, e.computer, "d/f")
			storetest.WantCode(t, err, bothy.EINVALID)
			_, err = e.fs.Readlink(e.ctx, e.tenant, e.computer, "nope")
			storetest.WantCode(t, err, bothy.ENOTFOUND)
		})
	})
}

func TestFS_ReadDir(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		for _, name := range []string{"c", "a", "b.txt", "B", "a.d/x"} {
			e.write("dir/"+name, name)
		}
		names := func(list []*bothy.FileInfo) string {
			var s []string
			for _, fi := range list {
				s = append(s, fi.Path+":"+fi.Type)
			}
			return strings.Join(s, " ")
		}
		t.Run("OK", func(t *testing.T) {
			list, err := e.fs.ReadDir(e.ctx, e.tenant, e.computer, "/dir/", bothy.ReadDirOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := names(list), "dir/B:file dir/a:file dir/a.d:dir dir/b.txt:file dir/c:file"; got != want {
				t.Fatalf("read dir = %s, want %s", got, want)
			}
		})
		t.Run("Page", func(t *testing.T) {
			list, err := e.fs.ReadDir(e.ctx, e.tenant, e.computer, "dir", bothy.ReadDirOptions{Offset: 1, Limit: 2})
			if err != nil || names(list) != "dir/a:file dir/a.d:dir" {
				t.Fatalf("page = %s, %v", names(list), err)
			}
			list, err = e.fs.ReadDir(e.ctx, e.tenant, e.computer, "dir", bothy.ReadDirOptions{Offset: 10})
			if err != nil || len(list) != 0 {
				t.Fatalf("page past end = %s, %v", names(list), err)
			}
		})
		t.Run("Root", func(t *testing.T) {
			list, err := e.fs.ReadDir(e.ctx, e.tenant, e.computer, ".", bothy.ReadDirOptions{})
			if err != nil || names(list) != "dir:dir" {
				t.Fatalf("root = %s, %v", names(list), err)
			}
		})
		t.Run("ThroughSymlink", func(t *testing.T) {
			e.symlink("dir/a.d", "ad")
			list, err := e.fs.ReadDir(e.ctx, e.tenant, e.computer, "ad", bothy.ReadDirOptions{})
			if err != nil || names(list) != "ad/x:file" {
				t.Fatalf("via link = %s, %v", names(list), err)
			}
		})
		t.Run("ErrNotDir", func(t *testing.T) {
			_, err := e.fs.ReadDir(e.ctx, e.tenant, e.computer, "dir/c", bothy.ReadDirOptions{})
			storetest.WantCode(t, err, bothy.ENOTDIR)
		})
		t.Run("ErrNotFound", func(t *testing.T) {
			_, err := e.fs.ReadDir(e.ctx, e.tenant, e.computer, "nope", bothy.ReadDirOptions{})
			storetest.WantCode(t, err, bothy.ENOTFOUND)
		})
		t.Run("ErrNegative", func(t *testing.T) {
			_, err := e.fs.ReadDir(e.ctx, e.tenant, e.computer, "dir", bothy.ReadDirOptions{Offset: -1})
			storetest.WantCode(t, err, bothy.EINVALID)
		})
	})
}

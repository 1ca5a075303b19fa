package http_test

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/storetest"
)

func read(t *testing.T, c *bhttp.Client, id, p string, off, length int64) (string, *bothy.FileInfo) {
	t.Helper()
	rc, fi, err := c.ReadFile(t.Context(), "", id, p, off, length)
	if err != nil {
		t.Fatalf("ReadFile(%s, %d, %d): %v", p, off, length, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), fi
}

func paths(infos []*bothy.FileInfo) []string {
	var s []string
	for _, fi := range infos {
		s = append(s, fi.Path)
	}
	return s
}

func testFiles(t *testing.T, e *env) {
	ctx, fsvc := t.Context(), bothy.FileService(e.acme)
	c := mustCreate(t, e.acme, bhttp.CreateComputerRequest{})
	id := c.ID

	rev, err := fsvc.WriteFile(ctx, "", id, "src/main.go", strings.NewReader("package main\n\nfunc main() {}\n"), bothy.WriteOptions{MkdirParents: true, Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	} else if rev.Number != 1 || rev.ComputerID != id || rev.FileCount != 1 {
		t.Errorf("WriteFile revision = %+v", rev)
	}
	got, fi := read(t, e.acme, id, "/src/main.go", 0, -1)
	if got != "package main\n\nfunc main() {}\n" || fi.Path != "src/main.go" || fi.Mode != 0o755 || fi.Size != int64(len(got)) || fi.ModTime.IsZero() {
		t.Errorf("ReadFile = %q, %+v", got, fi)
	}
	if got, _ := read(t, e.acme, id, "src/main.go", 8, 4); got != "main" {
		t.Errorf("range read = %q, want %q", got, "main")
	}
	if got, _ := read(t, e.acme, id, "src/main.go", 14, -1); got != "func main() {}\n" {
		t.Errorf("read to end = %q", got)
	}
	if got, fi := read(t, e.acme, id, "src/main.go", 1000, -1); got != "" || fi.Size != 29 {
		t.Errorf("read past end = %q, %+v", got, fi)
	}
	if got, _ := read(t, e.acme, id, "src/main.go", 3, 0); got != "" {
		t.Errorf("zero-length read = %q", got)
	}
	r := e.raw(t, "GET", "/v1/computers/"+id+"/files/src/main.go", e.acmeToken, nil, "Range", "bytes=-3")
	r.want(t, 206, "")
	if string(r.body) != "{}\n" || r.header.Get("Content-Range") != "bytes 26-28/29" {
		t.Errorf("suffix range = %q, Content-Range %q", r.body, r.header.Get("Content-Range"))
	}
	e.raw(t, "GET", "/v1/computers/"+id+"/files/src/main.go", e.acmeToken, nil, "Range", "bytes=29-").want(t, 416, bothy.EINVALID)

	// Stat, lstat, symlink, readlink.
	if _, err := fsvc.Symlink(ctx, "", id, "src/main.go", "link"); err != nil {
		t.Fatal(err)
	}
	if fi, err := fsvc.Stat(ctx, "", id, "link"); err != nil || fi.Type != bothy.FileTypeFile || fi.Size != 29 {
		t.Errorf("Stat(link) = %+v, %v", fi, err)
	}
	if fi, err := fsvc.Lstat(ctx, "", id, "link"); err != nil || fi.Type != bothy.FileTypeSymlink || fi.Target != "src/main.go" {
		t.Errorf("Lstat(link) = %+v, %v", fi, err)
	}
	if target, err := fsvc.Readlink(ctx, "", id, "link"); err != nil || target != "src/main.go" {
		t.Errorf("Readlink = %q, %v", target, err)
	}

	// Mkdir, chmod, rename, rm, each one revision.
	if _, err := fsvc.Mkdir(ctx, "", id, "docs/a", bothy.MkdirOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := fsvc.WriteFile(ctx, "", id, "docs/a/readme.md", strings.NewReader("hello world\nbye\n"), bothy.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fsvc.Chmod(ctx, "", id, "docs/a/readme.md", 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fsvc.Rename(ctx, "", id, "docs/a/readme.md", "docs/README.md"); err != nil {
		t.Fatal(err)
	}
	if rev, err = fsvc.Remove(ctx, "", id, "docs/a", bothy.RemoveOptions{}); err != nil {
		t.Fatal(err)
	} else if rev.Number != 7 {
		t.Errorf("revision after 7 mutations = %d", rev.Number)
	}
	infos, err := fsvc.ReadDir(ctx, "", id, "/", bothy.ReadDirOptions{})
	if err != nil {
		t.Fatal(err)
	} else if want := []string{"docs", "link", "src"}; !slices.Equal(paths(infos), want) {
		t.Errorf("ReadDir(/) = %q, want %q", paths(infos), want)
	}
	if infos, err := fsvc.ReadDir(ctx, "", id, "", bothy.ReadDirOptions{Offset: 1, Limit: 1}); err != nil || !slices.Equal(paths(infos), []string{"link"}) {
		t.Errorf("ReadDir page = %q, %v", paths(infos), err)
	}
	if fi, err := fsvc.Stat(ctx, "", id, "docs/README.md"); err != nil || fi.Mode != 0o600 {
		t.Errorf("Stat(docs/README.md) = %+v, %v", fi, err)
	}
	if infos, err := fsvc.Glob(ctx, "", id, "**/*.md", 0); err != nil || !slices.Equal(paths(infos), []string{"docs/README.md"}) {
		t.Errorf("Glob = %q, %v", paths(infos), err)
	}
	res, err := fsvc.Grep(ctx, "", id, bothy.GrepOptions{Pattern: "hel+o", Context: 1})
	if err != nil {
		t.Fatal(err)
	} else if len(res.Matches) != 1 || res.Matches[0].Path != "docs/README.md" || res.Matches[0].Line != 1 || !slices.Equal(res.Matches[0].After, []string{"bye"}) {
		t.Errorf("Grep = %+v", res)
	}
	if res, err := fsvc.Grep(ctx, "", id, bothy.GrepOptions{Pattern: "absent"}); err != nil || res.Matches == nil || len(res.Matches) != 0 {
		t.Errorf("Grep(absent) = %+v, %v", res, err)
	}

	// A batch commits one revision, or none.
	ops := []bothy.FileOp{
		{Op: bothy.FileOpWrite, Path: "batch/one.txt", Data: []byte("1"), Parents: true},
		{Op: bothy.FileOpWrite, Path: "batch/two.bin", Data: []byte{0, 1, 2, 255}},
		{Op: bothy.FileOpRemove, Path: "link"},
	}
	if rev, err = fsvc.Apply(ctx, "", id, ops); err != nil {
		t.Fatal(err)
	} else if rev.Number != 8 {
		t.Errorf("batch revision = %d, want 8", rev.Number)
	}
	if got, _ := read(t, e.acme, id, "batch/two.bin", 0, -1); !bytes.Equal([]byte(got), []byte{0, 1, 2, 255}) {
		t.Errorf("batch file = %q", got)
	}
	_, err = fsvc.Apply(ctx, "", id, []bothy.FileOp{{Op: bothy.FileOpWrite, Path: "batch/three.txt"}, {Op: bothy.FileOpRemove, Path: "nothing"}})
	storetest.WantCode(t, err, bothy.ENOTFOUND)
	_, err = fsvc.Apply(ctx, "", id, nil)
	storetest.WantCode(t, err, bothy.EINVALID)

	revs, err := e.acme.ListRevisions(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	} else if len(revs) != 8 || revs[0].Number != 8 || revs[7].Number != 1 || revs[0].CreatedBy == "" {
		t.Errorf("ListRevisions = %d revisions, first %+v", len(revs), revs[0])
	}
	if revs, err := e.acme.ListRevisions(ctx, id, 1, 2); err != nil || len(revs) != 2 || revs[0].Number != 7 {
		t.Errorf("ListRevisions page = %+v, %v", revs, err)
	}
	if got, err := e.acme.FindComputer(ctx, id); err != nil || got.Revision != 8 {
		t.Errorf("computer revision = %+v, %v", got, err)
	}
}

func testFileErrors(t *testing.T, e *env) {
	ctx, fsvc := t.Context(), bothy.FileService(e.acme)
	id := mustCreate(t, e.acme, bhttp.CreateComputerRequest{}).ID
	if _, err := fsvc.WriteFile(ctx, "", id, "dir/f.txt", strings.NewReader("x"), bothy.WriteOptions{MkdirParents: true}); err != nil {
		t.Fatal(err)
	}
	t.Run("ErrInvalidPath", func(t *testing.T) {
		_, err := fsvc.WriteFile(ctx, "", id, "../escape.txt", strings.NewReader("x"), bothy.WriteOptions{})
		storetest.WantCode(t, err, bothy.EINVALIDPATH)
		_, _, err = fsvc.ReadFile(ctx, "", id, "dir/../../etc/passwd", 0, -1)
		storetest.WantCode(t, err, bothy.EINVALIDPATH)
		_, err = fsvc.Stat(ctx, "", id, "../../etc")
		storetest.WantCode(t, err, bothy.EINVALIDPATH)
		_, err = fsvc.Mkdir(ctx, "", id, "a/../../b", bothy.MkdirOptions{Parents: true})
		storetest.WantCode(t, err, bothy.EINVALIDPATH)
		// Raw dot elements are refused rather than cleaned to another route.
		e.raw(t, "GET", "/v1/computers/"+id+"/files/../../etc/passwd", e.acmeToken, nil).want(t, 400, bothy.EINVALIDPATH)
		e.raw(t, "GET", "/v1/computers/"+id+"/files/%2e%2e/x", e.acmeToken, nil).want(t, 400, bothy.EINVALIDPATH)
		e.raw(t, "GET", "/v1/computers/"+id+"/fs/list?path=..", e.acmeToken, nil).want(t, 400, bothy.EINVALIDPATH)
		// A symlink out of the workspace is never followed.
		if _, err := fsvc.Symlink(ctx, "", id, "/etc", "out"); err != nil {
			t.Fatal(err)
		}
		_, _, err = fsvc.ReadFile(ctx, "", id, "out/passwd", 0, -1)
		storetest.WantCode(t, err, bothy.EINVALIDPATH)
	})
	t.Run("ErrTooLarge", func(t *testing.T) {
		big := bytes.Repeat([]byte("x"), maxFile+1)
		// Streamed (no Content-Length) and with a Content-Length.
		_, err := fsvc.WriteFile(ctx, "", id, "big.bin", io.MultiReader(bytes.NewReader(big)), bothy.WriteOptions{})
		storetest.WantCode(t, err, bothy.ETOOLARGE)
		e.raw(t, "PUT", "/v1/computers/"+id+"/files/big.bin", e.acmeToken, bytes.NewReader(big)).want(t, 413, bothy.ETOOLARGE)
		ops := []bothy.FileOp{{Op: bothy.FileOpWrite, Path: "a", Data: big}, {Op: bothy.FileOpWrite, Path: "b", Data: big}}
		_, err = fsvc.Apply(ctx, "", id, ops)
		storetest.WantCode(t, err, bothy.ETOOLARGE)
		if _, err := fsvc.WriteFile(ctx, "", id, "max.bin", bytes.NewReader(big[:maxFile]), bothy.WriteOptions{}); err != nil {
			t.Fatalf("a file of exactly the limit: %v", err)
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		_, err := fsvc.WriteFile(ctx, "", id, "dir/f.txt", strings.NewReader("y"), bothy.WriteOptions{Exclusive: true})
		storetest.WantCode(t, err, bothy.ECONFLICT)
		e.raw(t, "PUT", "/v1/computers/"+id+"/files/dir/f.txt?exclusive=1", e.acmeToken, strings.NewReader("y")).want(t, 409, bothy.ECONFLICT)
		if got, _ := read(t, e.acme, id, "dir/f.txt", 0, -1); got != "x" {
			t.Errorf("exclusive write changed the file: %q", got)
		}
		_, _, err = fsvc.ReadFile(ctx, "", id, "dir", 0, -1)
		storetest.WantCode(t, err, bothy.EISDIR)
		e.raw(t, "GET", "/v1/computers/"+id+"/files/dir", e.acmeToken, nil).want(t, 409, bothy.EISDIR)
		_, err = fsvc.ReadDir(ctx, "", id, "dir/f.txt", bothy.ReadDirOptions{})
		storetest.WantCode(t, err, bothy.ENOTDIR)
		_, err = fsvc.Remove(ctx, "", id, "dir", bothy.RemoveOptions{})
		storetest.WantCode(t, err, bothy.ENOTEMPTY)
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		e.raw(t, "PUT", "/v1/computers/"+id+"/files/m.txt?mode=999", e.acmeToken, strings.NewReader("y")).want(t, 400, bothy.EINVALID)
		e.raw(t, "PUT", "/v1/computers/"+id+"/files/m.txt?exclusive=maybe", e.acmeToken, strings.NewReader("y")).want(t, 400, bothy.EINVALID)
		e.raw(t, "POST", "/v1/computers/"+id+"/fs/mkdir", e.acmeToken, strings.NewReader(`{"path":"x","mdoe":493}`)).want(t, 400, bothy.EINVALID)
		_, err := fsvc.Grep(ctx, "", id, bothy.GrepOptions{Pattern: "("})
		storetest.WantCode(t, err, bothy.EINVALID)
		_, err = fsvc.Readlink(ctx, "", id, "dir/f.txt")
		storetest.WantCode(t, err, bothy.EINVALID)
		_, _, err = fsvc.ReadFile(ctx, "", id, "missing.txt", 0, -1)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
}

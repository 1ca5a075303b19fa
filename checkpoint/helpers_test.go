package checkpoint_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io/fs"
	mrand "math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/gcs/gcstest"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/storetest"
)

// testBlobs is a blob store under test and, for localblob, its directory.
type testBlobs struct {
	bothy.BlobStore
	dir string // localblob's root, "" for GCS
}

// blobStores returns a constructor per blob store implementation.
func blobStores(t *testing.T) map[string]func(t *testing.T) testBlobs {
	return map[string]func(t *testing.T) testBlobs{
		"localblob": func(t *testing.T) testBlobs {
			dir := t.TempDir()
			s, err := localblob.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			return testBlobs{s, dir}
		},
		"gcs": func(t *testing.T) testBlobs { return testBlobs{gcstest.New(t), ""} },
	}
}

// forEachBlobStore runs fn as a subtest per blob store.
func forEachBlobStore(t *testing.T, fn func(t *testing.T, blobs testBlobs)) {
	for name, open := range blobStores(t) {
		t.Run(name, func(t *testing.T) { fn(t, open(t)) })
	}
}

// forEachStore runs fn as a subtest per (metadata store, blob store) pair.
func forEachStore(t *testing.T, fn func(t *testing.T, store bothy.Store, blobs testBlobs)) {
	for _, m := range storetest.Engines {
		for bname, bopen := range blobStores(t) {
			t.Run(m.Name+"/"+bname, func(t *testing.T) { fn(t, m.Open(t), bopen(t)) })
		}
	}
}

func newKey(t *testing.T) []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}

func newRepo(t *testing.T, blobs bothy.BlobStore, tenant string, key []byte) *checkpoint.Repo {
	t.Helper()
	r, err := checkpoint.NewRepo(blobs, tenant, key)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustCheckpoint(t *testing.T, r *checkpoint.Repo, dir string, parent *checkpoint.Snapshot, cache string) *checkpoint.Result {
	t.Helper()
	res, err := r.Checkpoint(t.Context(), dir, parent, checkpoint.CheckpointOptions{StatCache: cache})
	if err != nil {
		t.Fatalf("Checkpoint(%s): %v", dir, err)
	}
	return res
}

func mustOpen(t *testing.T, r *checkpoint.Repo, res *checkpoint.Result) *checkpoint.Snapshot {
	t.Helper()
	s, err := r.Open(t.Context(), res.Root.String(), res.Packs)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// packSizes returns the size of each pack blob of a tenant.
func packSizes(t *testing.T, blobs bothy.BlobStore, tenant string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := blobs.ListBlobs(t.Context(), "packs/"+tenant+"/", func(b bothy.BlobInfo) error {
		out[strings.TrimPrefix(b.Key, "packs/"+tenant+"/")] = b.Size
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// newPacks returns the packs in after that are not in before, and their bytes.
func newPacks(before, after map[string]int64) (names []string, bytes int64) {
	for k, v := range after {
		if _, ok := before[k]; !ok {
			names = append(names, k)
			bytes += v
		}
	}
	sort.Strings(names)
	return names, bytes
}

// writeFile writes b with mode and a fixed mtime in the past.
func writeFile(t *testing.T, path string, b []byte, mode fs.FileMode, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

var baseTime = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

// genTree writes a seeded tree of nSmall small files (0–8 KiB, nested
// directories, some executable), a big file of bigSize bytes (partly
// compressible) at big/data.bin, empty directories and symlinks.
func genTree(t *testing.T, dir string, seed int64, nSmall int, bigSize int) {
	t.Helper()
	rng := mrand.New(mrand.NewSource(seed))
	pool := make([]byte, 4<<20)
	rng.Read(pool[:2<<20])
	words := []string{"alpha ", "bothy ", "checkpoint ", "delta ", "echo ", "func ", "return ", "\n", "{ ", "} "}
	for i := 2 << 20; i < len(pool); {
		w := words[rng.Intn(len(words))]
		i += copy(pool[i:], w)
	}
	for i := 0; i < nSmall; i++ {
		p := filepath.Join(dir, fmt.Sprintf("d%02d", i%20), fmt.Sprintf("s%d", (i/20)%10), fmt.Sprintf("f%05d.txt", i))
		size := rng.Intn(8193)
		off := rng.Intn(len(pool) - size)
		mode := fs.FileMode(0o644)
		switch i % 7 {
		case 0:
			mode = 0o755
		case 1:
			mode = 0o600
		case 2:
			mode = 0o444
		}
		writeFile(t, p, pool[off:off+size], mode, baseTime.Add(time.Duration(i)*time.Second))
	}
	if bigSize > 0 {
		big := make([]byte, bigSize)
		for off := 0; off < bigSize; off += 1 << 20 {
			end := min(off+1<<20, bigSize)
			if (off>>20)%2 == 0 {
				rng.Read(big[off:end])
			} else {
				copy(big[off:end], pool[2<<20+rng.Intn(1<<20):])
			}
		}
		writeFile(t, filepath.Join(dir, "big", "data.bin"), big, 0o640, baseTime)
	}
	for _, d := range []string{"empty", "d00/empty-too", "locked"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "locked", "inside"), []byte("x"), 0o644, baseTime)
	if err := os.Chmod(filepath.Join(dir, "locked"), 0o555); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "tool.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755, baseTime)
	for name, target := range map[string]string{
		"link-rel":      "tool.sh",
		"link-dangling": "no/such/file",
		"link-abs":      "/etc/hostname",
		"link-dir":      "d00",
	} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// Keep every timestamp out of the checkpoint's racy window.
	time.Sleep(60 * time.Millisecond)
}

type fileInfo struct {
	typ    fs.FileMode
	perm   fs.FileMode
	target string
	mtime  int64
	size   int64
}

func scanTree(t *testing.T, dir string) map[string]fileInfo {
	t.Helper()
	out := map[string]fileInfo{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		info := fileInfo{typ: fi.Mode().Type(), perm: fi.Mode().Perm()}
		switch {
		case fi.Mode().IsRegular():
			info.mtime = fi.ModTime().UnixNano()
			info.size = fi.Size()
		case fi.Mode()&fs.ModeSymlink != 0:
			info.target, _ = os.Readlink(p)
			info.perm = 0
		}
		out[rel] = info
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// compareTrees fails unless got has the same names, types, permission
// bits, contents, symlink targets and file mtimes as want.
func compareTrees(t *testing.T, want, got string) {
	t.Helper()
	w, g := scanTree(t, want), scanTree(t, got)
	for p, wi := range w {
		gi, ok := g[p]
		if !ok {
			t.Errorf("%s: missing after restore", p)
			continue
		}
		if wi != gi {
			t.Errorf("%s: got %+v, want %+v", p, gi, wi)
			continue
		}
		if wi.typ == 0 {
			a, _ := os.ReadFile(filepath.Join(want, p))
			b, _ := os.ReadFile(filepath.Join(got, p))
			if !bytes.Equal(a, b) {
				t.Errorf("%s: content differs", p)
			}
		}
	}
	for p := range g {
		if _, ok := w[p]; !ok {
			t.Errorf("%s: unexpected after restore", p)
		}
	}
}

// corruptByte flips one byte of a blob in place: on disk for localblob,
// by delete and put for GCS.
func corruptByte(t *testing.T, blobs testBlobs, key string, off int64) {
	t.Helper()
	ctx := t.Context()
	if blobs.dir != "" {
		p := filepath.Join(blobs.dir, filepath.FromSlash(key))
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[off] ^= 0x40
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	rc, err := blobs.GetBlob(ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.ReadFrom(rc)
	rc.Close()
	b := buf.Bytes()
	b[off] ^= 0x40
	if err := blobs.DeleteBlob(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.PutBlob(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
}

// chmodAll makes a restored or generated tree removable by t.TempDir's cleanup.
func chmodAll(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
}

func errCode(err error) string { return bothy.ErrorCode(err) }

func readAll(rc interface {
	Read([]byte) (int, error)
	Close() error
}) ([]byte, error) {
	defer rc.Close()
	var buf bytes.Buffer
	_, err := buf.ReadFrom(rc)
	return buf.Bytes(), err
}

func itoa(i int) string { return fmt.Sprint(i) }
func pad2(i int) string { return fmt.Sprintf("%02d", i) }

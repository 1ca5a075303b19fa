// Package blobtest is the conformance suite for bothy.BlobStore. Every
// implementation calls TestBlobStore from its own tests.
package blobtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/bothyhq/bothy"
)

// TestBlobStore runs the conformance suite against the stores open returns.
// open is called once per subtest and must return an empty store that lives
// until the subtest ends.
func TestBlobStore(t *testing.T, open func(t *testing.T) bothy.BlobStore) {
	t.Run("PutBlob", func(t *testing.T) { testPutBlob(t, open) })
	t.Run("GetBlob", func(t *testing.T) { testGetBlob(t, open) })
	t.Run("StatBlob", func(t *testing.T) { testStatBlob(t, open) })
	t.Run("DeleteBlob", func(t *testing.T) { testDeleteBlob(t, open) })
	t.Run("ListBlobs", func(t *testing.T) { testListBlobs(t, open) })
	t.Run("InvalidKey", func(t *testing.T) { testInvalidKey(t, open) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, open) })
}

func testPutBlob(t *testing.T, open func(t *testing.T) bothy.BlobStore) {
	t.Run("OK", func(t *testing.T) {
		s, ctx := open(t), context.Background()
		data := Bytes(1, 1000)
		MustPut(t, s, "packs/t1/aa", data, true)
		if got := MustGet(t, s, "packs/t1/aa"); !bytes.Equal(got, data) {
			t.Fatalf("got %d bytes, want %d bytes %q...", len(got), len(data), data[:8])
		}
		// A blob of zero bytes is a blob.
		MustPut(t, s, "empty", nil, true)
		if info, err := s.StatBlob(ctx, "empty"); err != nil {
			t.Fatal(err)
		} else if info.Size != 0 {
			t.Fatalf("size = %d, want 0", info.Size)
		}
		if got := MustGet(t, s, "empty"); len(got) != 0 {
			t.Fatalf("empty blob read %d bytes", len(got))
		}
		if got := mustGetRange(t, s, "empty", 0, 10); len(got) != 0 {
			t.Fatalf("empty blob range read %d bytes", len(got))
		}
	})

	t.Run("Exists", func(t *testing.T) {
		s, ctx := open(t), context.Background()
		data := Bytes(2, 4096)
		MustPut(t, s, "k", data, true)
		before := mustStat(t, s, "k")

		// Same size, other bytes: a content-addressed store must keep the first.
		MustPut(t, s, "k", Bytes(3, 4096), false)
		// A key that already exists reads nothing from the reader.
		created, err := s.PutBlob(ctx, "k", failReader{t}, 10)
		if err != nil || created {
			t.Fatalf("put existing with failing reader: created=%v err=%v, want false, nil", created, err)
		}
		if got := MustGet(t, s, "k"); !bytes.Equal(got, data) {
			t.Fatal("existing blob was overwritten")
		}
		if after := mustStat(t, s, "k"); after.Size != before.Size || !after.ModTime.Equal(before.ModTime) {
			t.Fatalf("stat after second put = %+v, want %+v", after, before)
		}
	})

	t.Run("ErrReader", func(t *testing.T) {
		s, ctx := open(t), context.Background()
		data := Bytes(4, 100_000)
		r := io.MultiReader(bytes.NewReader(data[:50_000]), iotest.ErrReader(errBroken))
		if _, err := s.PutBlob(ctx, "k", r, int64(len(data))); !errors.Is(err, errBroken) {
			t.Fatalf("put with failing reader: err = %v, want %v", err, errBroken)
		}
		mustNotExist(t, s, "k")
		MustPut(t, s, "k", data, true)
		if got := MustGet(t, s, "k"); !bytes.Equal(got, data) {
			t.Fatal("content mismatch after retried put")
		}
	})

	t.Run("ShortReader", func(t *testing.T) {
		s, ctx := open(t), context.Background()
		data := Bytes(5, 1000)
		if _, err := s.PutBlob(ctx, "k", bytes.NewReader(data), 1001); err == nil {
			t.Fatal("put with short reader: err = nil")
		}
		mustNotExist(t, s, "k")
		MustPut(t, s, "k", data, true)
	})

	t.Run("LongReader", func(t *testing.T) {
		s, ctx := open(t), context.Background()
		data := Bytes(6, 1000)
		if _, err := s.PutBlob(ctx, "k", bytes.NewReader(data), 999); err == nil {
			t.Fatal("put with long reader: err = nil")
		}
		mustNotExist(t, s, "k")
	})

	t.Run("NegativeSize", func(t *testing.T) {
		s := open(t)
		if _, err := s.PutBlob(context.Background(), "k", bytes.NewReader(nil), -1); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Fatalf("err = %v, want EINVALID", err)
		}
	})

	t.Run("Canceled", func(t *testing.T) {
		s := open(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.PutBlob(ctx, "k", bytes.NewReader(Bytes(7, 100)), 100); err == nil {
			t.Fatal("put with canceled context: err = nil")
		}
		mustNotExist(t, s, "k")
	})

	t.Run("Large", func(t *testing.T) {
		s := open(t)
		data := Bytes(8, 40<<20)
		MustPut(t, s, "packs/large", data, true)
		if got := MustGet(t, s, "packs/large"); !bytes.Equal(got, data) {
			t.Fatalf("large blob mismatch: got %d bytes, want %d", len(got), len(data))
		}
		if got := mustGetRange(t, s, "packs/large", 30<<20, 5); !bytes.Equal(got, data[30<<20:30<<20+5]) {
			t.Fatal("large blob range mismatch")
		}
	})
}

func testGetBlob(t *testing.T, open func(t *testing.T) bothy.BlobStore) {
	s, ctx := open(t), context.Background()
	data := Bytes(10, 1000)
	MustPut(t, s, "a/b", data, true)

	for _, tt := range []struct {
		name        string
		off, length int64
		want        []byte
	}{
		{"All", 0, -1, data},
		{"Start", 0, 10, data[:10]},
		{"Middle", 100, 250, data[100:350]},
		{"ToEnd", 990, -1, data[990:]},
		{"PastEnd", 990, 100, data[990:]},
		{"ZeroLength", 10, 0, nil},
		{"AtEnd", 1000, -1, nil},
		{"BeyondEnd", 5000, -1, nil},
		{"BeyondEndLength", 5000, 10, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustGetRange(t, s, "a/b", tt.off, tt.length); !bytes.Equal(got, tt.want) {
				t.Fatalf("GetBlob(%d, %d) = %d bytes, want %d", tt.off, tt.length, len(got), len(tt.want))
			}
		})
	}

	t.Run("ErrNotFound", func(t *testing.T) {
		for _, length := range []int64{-1, 0, 10} {
			rc, err := s.GetBlob(ctx, "a/missing", 0, length)
			if err == nil {
				rc.Close()
			}
			if !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("get missing (length %d): err = %v, want fs.ErrNotExist", length, err)
			}
		}
		// A key whose "directory" is a blob, and a key that is only a prefix.
		for _, key := range []string{"a/b/c", "a"} {
			rc, err := s.GetBlob(ctx, key, 0, -1)
			if err == nil {
				rc.Close()
			}
			if !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("get %s: err = %v, want fs.ErrNotExist", key, err)
			}
		}
	})

	t.Run("ErrNegativeOffset", func(t *testing.T) {
		rc, err := s.GetBlob(ctx, "a/b", -1, -1)
		if err == nil {
			rc.Close()
		}
		if bothy.ErrorCode(err) != bothy.EINVALID {
			t.Fatalf("err = %v, want EINVALID", err)
		}
	})
}

func testStatBlob(t *testing.T, open func(t *testing.T) bothy.BlobStore) {
	t.Run("OK", func(t *testing.T) {
		s := open(t)
		before := time.Now()
		MustPut(t, s, "x/y", Bytes(20, 1234), true)
		after := time.Now()
		info := mustStat(t, s, "x/y")
		if info.Key != "x/y" || info.Size != 1234 {
			t.Fatalf("stat = %+v, want key x/y size 1234", info)
		}
		// A remote store's clock may differ from ours.
		if info.ModTime.Before(before.Add(-time.Minute)) || info.ModTime.After(after.Add(time.Minute)) {
			t.Fatalf("mod time %v is not near %v", info.ModTime, before)
		}
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		s := open(t)
		MustPut(t, s, "x/y", []byte("hi"), true)
		for _, key := range []string{"x/z", "x", "x/y/z"} {
			if _, err := s.StatBlob(context.Background(), key); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("stat %s: err = %v, want fs.ErrNotExist", key, err)
			}
		}
	})
}

func testDeleteBlob(t *testing.T, open func(t *testing.T) bothy.BlobStore) {
	s, ctx := open(t), context.Background()
	MustPut(t, s, "d/1", []byte("one"), true)
	MustPut(t, s, "d/2", []byte("two"), true)
	t.Run("OK", func(t *testing.T) {
		if err := s.DeleteBlob(ctx, "d/1"); err != nil {
			t.Fatal(err)
		}
		mustNotExist(t, s, "d/1")
		if got := MustGet(t, s, "d/2"); string(got) != "two" {
			t.Fatalf("d/2 = %q", got)
		}
		// After a delete, the key can be written again.
		MustPut(t, s, "d/1", []byte("uno"), true)
		if got := MustGet(t, s, "d/1"); string(got) != "uno" {
			t.Fatalf("d/1 = %q", got)
		}
	})
	t.Run("Missing", func(t *testing.T) {
		for _, key := range []string{"d/missing", "nothing/here", "d", "d/2/x"} {
			if err := s.DeleteBlob(ctx, key); err != nil {
				t.Fatalf("delete missing %s: %v", key, err)
			}
		}
		if got := MustGet(t, s, "d/2"); string(got) != "two" {
			t.Fatalf("d/2 = %q", got)
		}
	})
}

func testListBlobs(t *testing.T, open func(t *testing.T) bothy.BlobStore) {
	s, ctx := open(t), context.Background()
	// Chosen so that directory walk order and key order differ: '-' < '.' <
	// '/' < '_'. No key is also a "directory" ("a" beside "a/b"), which a
	// file system cannot hold.
	keys := []string{"a-b", "a.c", "a/b", "a/c/d", "a_b", "b/x", "packs/t1/01", "packs/t1/02", "packs/t10/01", "packs/t2/01"}
	for i, key := range rand.Perm(len(keys)) {
		MustPut(t, s, keys[key], Bytes(uint64(i), key+1), true)
	}
	sizes := map[string]int64{}
	for i, key := range keys {
		sizes[key] = int64(i + 1)
	}

	list := func(t *testing.T, prefix string) []string {
		t.Helper()
		var got []string
		err := s.ListBlobs(ctx, prefix, func(info bothy.BlobInfo) error {
			if info.Size != sizes[info.Key] {
				t.Errorf("list: %s size = %d, want %d", info.Key, info.Size, sizes[info.Key])
			}
			if info.ModTime.IsZero() {
				t.Errorf("list: %s has zero mod time", info.Key)
			}
			got = append(got, info.Key)
			return nil
		})
		if err != nil {
			t.Fatalf("list %q: %v", prefix, err)
		}
		return got
	}

	for _, tt := range []struct {
		prefix string
		want   []string
	}{
		{"", keys},
		{"a", []string{"a-b", "a.c", "a/b", "a/c/d", "a_b"}},
		{"a/", []string{"a/b", "a/c/d"}},
		{"a/c", []string{"a/c/d"}},
		{"packs/t1", []string{"packs/t1/01", "packs/t1/02", "packs/t10/01"}},
		{"packs/t1/", []string{"packs/t1/01", "packs/t1/02"}},
		{"packs/t1/0", []string{"packs/t1/01", "packs/t1/02"}},
		{"packs/t1/02", []string{"packs/t1/02"}},
		{"packs/t3", nil},
		{"zzz/", nil},
		{"../", nil},
		{"a//", nil},
	} {
		t.Run(fmt.Sprintf("Prefix=%q", tt.prefix), func(t *testing.T) {
			if got := list(t, tt.prefix); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("list %q = %q, want %q", tt.prefix, got, tt.want)
			}
		})
	}

	t.Run("StopOnError", func(t *testing.T) {
		stop := errors.New("stop")
		var n int
		err := s.ListBlobs(ctx, "", func(bothy.BlobInfo) error {
			if n++; n == 3 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || n != 3 {
			t.Fatalf("list: err = %v after %d calls, want %v after 3", err, n, stop)
		}
	})

	t.Run("AfterDelete", func(t *testing.T) {
		if err := s.DeleteBlob(ctx, "a/c/d"); err != nil {
			t.Fatal(err)
		}
		if got, want := list(t, "a/"), []string{"a/b"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("list a/ = %q, want %q", got, want)
		}
	})
}

func testInvalidKey(t *testing.T, open func(t *testing.T) bothy.BlobStore) {
	s, ctx := open(t), context.Background()
	for _, key := range []string{"", "..", "../x", "a/../b", "a//b", "/a", "a/", "./a", "a/.", "a b", "a\x00b", "a\\b"} {
		t.Run(fmt.Sprintf("%q", key), func(t *testing.T) {
			if _, err := s.PutBlob(ctx, key, bytes.NewReader([]byte("x")), 1); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("put: err = %v, want EINVALID", err)
			}
			if rc, err := s.GetBlob(ctx, key, 0, -1); bothy.ErrorCode(err) != bothy.EINVALID {
				if err == nil {
					rc.Close()
				}
				t.Errorf("get: err = %v, want EINVALID", err)
			}
			if _, err := s.StatBlob(ctx, key); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("stat: err = %v, want EINVALID", err)
			}
			if err := s.DeleteBlob(ctx, key); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("delete: err = %v, want EINVALID", err)
			}
		})
	}
}

func testConcurrent(t *testing.T, open func(t *testing.T) bothy.BlobStore) {
	s, ctx := open(t), context.Background()
	const writers, keys = 8, 4
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created = map[string]int{}
		start   = make(chan struct{})
	)
	for w := range writers {
		for k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				key := fmt.Sprintf("c/%d", k)
				ok, err := s.PutBlob(ctx, key, bytes.NewReader(Bytes(uint64(100+k), 256<<10)), 256<<10)
				if err != nil {
					t.Errorf("writer %d: put %s: %v", w, key, err)
				}
				mu.Lock()
				defer mu.Unlock()
				if ok {
					created[key]++
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	for k := range keys {
		key := fmt.Sprintf("c/%d", k)
		if created[key] != 1 {
			t.Errorf("%s created %d times, want 1", key, created[key])
		}
		if got := MustGet(t, s, key); !bytes.Equal(got, Bytes(uint64(100+k), 256<<10)) {
			t.Errorf("%s content mismatch (%d bytes)", key, len(got))
		}
	}
}

// Bytes returns n pseudo-random bytes determined by seed.
func Bytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// MustPut puts data under key and fails the test unless created is as wanted.
func MustPut(tb testing.TB, s bothy.BlobWriter, key string, data []byte, wantCreated bool) {
	tb.Helper()
	created, err := s.PutBlob(context.Background(), key, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		tb.Fatalf("put %s: %v", key, err)
	} else if created != wantCreated {
		tb.Fatalf("put %s: created = %v, want %v", key, created, wantCreated)
	}
}

// MustGet returns the whole blob stored under key.
func MustGet(tb testing.TB, s bothy.BlobReader, key string) []byte {
	tb.Helper()
	return mustGetRange(tb, s, key, 0, -1)
}

func mustGetRange(tb testing.TB, s bothy.BlobReader, key string, off, length int64) []byte {
	tb.Helper()
	rc, err := s.GetBlob(context.Background(), key, off, length)
	if err != nil {
		tb.Fatalf("get %s [%d,%d]: %v", key, off, length, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		tb.Fatalf("read %s [%d,%d]: %v", key, off, length, err)
	}
	if err := rc.Close(); err != nil {
		tb.Fatalf("close %s: %v", key, err)
	}
	return b
}

func mustStat(tb testing.TB, s bothy.BlobReader, key string) bothy.BlobInfo {
	tb.Helper()
	info, err := s.StatBlob(context.Background(), key)
	if err != nil {
		tb.Fatalf("stat %s: %v", key, err)
	}
	return info
}

func mustNotExist(tb testing.TB, s bothy.BlobStore, key string) {
	tb.Helper()
	if info, err := s.StatBlob(context.Background(), key); !errors.Is(err, fs.ErrNotExist) {
		tb.Fatalf("stat %s = %+v, %v; want fs.ErrNotExist", key, info, err)
	}
	err := s.ListBlobs(context.Background(), key, func(info bothy.BlobInfo) error {
		if info.Key == key {
			return fmt.Errorf("list holds %s (%d bytes)", key, info.Size)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

var errBroken = errors.New("broken reader")

// failReader fails the test if read.
type failReader struct{ tb testing.TB }

func (r failReader) Read([]byte) (int, error) {
	r.tb.Errorf("reader read although the key exists")
	return 0, errors.New("unexpected read")
}

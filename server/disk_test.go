package server_test

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	nethttp "net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/server"
	"github.com/bothyhq/bothy/sqlite"
	"github.com/bothyhq/bothy/testenv"
)

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestServer_DiskFull serves the API from a data directory on a 16 MiB
// tmpfs (the SQLite store and the blobs both on it): a 100 MB file write
// answers 507 insufficient_storage, not 500; a file written before can
// still be read; and /readyz reports the disk once less than
// MinFreeBytes is free.
func TestServer_DiskFull(t *testing.T) {
	testenv.Root(t, "mounts a tmpfs")
	data := t.TempDir()
	testenv.Tmpfs(t, data, "size=16m")
	ctx := t.Context()
	store, err := sqlite.Open(ctx, filepath.Join(data, "bothy.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	blobs, err := localblob.Open(filepath.Join(data, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := bothy.NewTenant("full", "full")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateTenant(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	_, token, err := store.CreateToken(ctx, tenant.ID, "full", []string{bothy.ScopeAdmin}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	const minFree = 4 << 20
	logw := io.Discard
	if testing.Verbose() {
		logw = os.Stderr
	}
	srv, err := server.New(server.Config{Data: data, Store: store, Blobs: blobs, MinFreeBytes: minFree,
		Logger: slog.New(slog.NewTextHandler(logw, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	do := func(method, path string, body io.Reader, size int64) (int, string) {
		t.Helper()
		req, err := nethttp.NewRequestWithContext(ctx, method, hs.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = size
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := nethttp.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	st, body := do("POST", "/v1/computers", strings.NewReader(`{}`), 2)
	if st != nethttp.StatusCreated {
		t.Fatalf("create computer: %d %s", st, body)
	}
	var c struct{ ID string }
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatal(err)
	}
	files := "/v1/computers/" + c.ID + "/files/"
	if st, body := do("PUT", files+"small.txt", strings.NewReader("hello"), 5); st != nethttp.StatusOK && st != nethttp.StatusCreated && st != nethttp.StatusNoContent {
		t.Fatalf("PUT small.txt: %d %s", st, body)
	}
	if st, body := do("GET", "/readyz", nil, 0); st != nethttp.StatusOK {
		t.Errorf("GET /readyz with room: %d %s", st, body)
	}

	const big = 100 << 20
	// Random bytes: zeros would compress to nothing in the packs.
	st, body = do("PUT", files+"big.bin", io.LimitReader(rand.NewChaCha8([32]byte{}), big), big)
	var e struct {
		Error struct{ Code, Message string }
	}
	json.Unmarshal([]byte(body), &e)
	if st != nethttp.StatusInsufficientStorage || e.Error.Code != bothy.EINSUFFICIENT {
		t.Errorf("PUT of 100 MB into 16 MiB: %d %s; want 507 %s", st, body, bothy.EINSUFFICIENT)
	}
	if st, body := do("GET", files+"small.txt", nil, 0); st != nethttp.StatusOK || body != "hello" {
		t.Errorf("GET small.txt on a full disk: %d %q; want 200 \"hello\"", st, body)
	}

	// Leave less than minFree free: /readyz names the disk.
	var sfs unix.Statfs_t
	if err := unix.Statfs(data, &sfs); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(data, "filler")
	if free := int64(sfs.Bavail) * sfs.Bsize; free > minFree/2 {
		f, err := os.Create(filler)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(f, io.LimitReader(zeros{}, free-minFree/2))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	st, body = do("GET", "/readyz", nil, 0)
	if st != nethttp.StatusServiceUnavailable || !strings.Contains(body, `"disk":"`+bothy.EINSUFFICIENT) {
		t.Errorf("GET /readyz with the disk full: %d %s; want 503 naming the disk", st, body)
	}

	// Fill the disk to the last byte: a write to the SQLite store is 507
	// too, and reads still work.
	f, err := os.OpenFile(filler, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, io.LimitReader(zeros{}, 64<<20)); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("fill the tmpfs: %v, want ENOSPC", err)
	}
	f.Close()
	full := false
	for i := 0; i < 1000 && !full; i++ {
		// Until SQLite has filled the free pages it already had.
		st, body := do("POST", "/v1/computers", strings.NewReader(`{"label":"`+strings.Repeat("x", 250)+`"}`), -1)
		if st == nethttp.StatusCreated {
			continue
		}
		full = true
		json.Unmarshal([]byte(body), &e)
		if st != nethttp.StatusInsufficientStorage || e.Error.Code != bothy.EINSUFFICIENT {
			t.Errorf("create computer %d on a full disk: %d %s; want 507 %s", i, st, body, bothy.EINSUFFICIENT)
		}
	}
	if !full {
		t.Errorf("1000 computers created on a full disk")
	}
	if st, body := do("GET", "/v1/computers/"+c.ID, nil, 0); st != nethttp.StatusOK {
		t.Errorf("GET computer on a full disk: %d %s", st, body)
	}
	if st, body := do("GET", files+"small.txt", nil, 0); st != nethttp.StatusOK || body != "hello" {
		t.Errorf("GET small.txt on a full disk: %d %q; want 200 \"hello\"", st, body)
	}

	os.Remove(filler)
	if st, body := do("POST", "/v1/computers", strings.NewReader(`{}`), 2); st != nethttp.StatusCreated {
		t.Errorf("create computer with room again: %d %s", st, body)
	}
	if st, body := do("GET", "/readyz", nil, 0); st != nethttp.StatusOK {
		t.Errorf("GET /readyz with room again: %d %s", st, body)
	}
}

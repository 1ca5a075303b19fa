package localblob_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/blobtest"
	"github.com/bothyhq/bothy/localblob"
)

func TestStore(t *testing.T) {
	blobtest.TestBlobStore(t, func(t *testing.T) bothy.BlobStore {
		return MustOpen(t, t.TempDir())
	})
}

// MustOpen opens the store in dir or fails the test.
func MustOpen(tb testing.TB, dir string) *localblob.Store {
	tb.Helper()
	s, err := localblob.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestOpen_RemovesStaleTemp checks that Open removes temporary files a
// crashed writer left more than an hour ago, and keeps recent ones.
func TestOpen_RemovesStaleTemp(t *testing.T) {
	dir := t.TempDir()
	MustOpen(t, dir)
	tmp := filepath.Join(dir, "~tmp")
	old, recent := filepath.Join(tmp, "put-old"), filepath.Join(tmp, "put-recent")
	for _, path := range []string{old, recent} {
		if err := os.WriteFile(path, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	s := MustOpen(t, dir)
	if _, err := os.Stat(old); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale temp file: stat err = %v, want not exist", err)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("recent temp file: %v", err)
	}
	// The temporary directory is not a blob.
	if err := s.ListBlobs(context.Background(), "", func(info bothy.BlobInfo) error {
		return fmt.Errorf("unexpected blob %s", info.Key)
	}); err != nil {
		t.Fatal(err)
	}
}

package localblob_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/testenv"
)

// TestStore_PutBlob_DiskFull writes a blob larger than the 1 MiB tmpfs the
// store is on: the error is EINSUFFICIENT with ENOSPC in its chain, no
// temporary file is left, and a blob written before still reads.
func TestStore_PutBlob_DiskFull(t *testing.T) {
	dir := t.TempDir()
	testenv.Tmpfs(t, dir, "size=1m")
	s := MustOpen(t, dir)
	if _, err := s.PutBlob(t.Context(), "small", bytes.NewReader([]byte("hi")), 2); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 2<<20)
	_, err := s.PutBlob(t.Context(), "big", bytes.NewReader(big), int64(len(big)))
	if code := bothy.ErrorCode(err); code != bothy.EINSUFFICIENT || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("PutBlob of 2 MiB into 1 MiB: %v (code %q), want %s with ENOSPC", err, code, bothy.EINSUFFICIENT)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "~tmp")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if _, err := s.StatBlob(t.Context(), "small"); err != nil {
		t.Errorf("stat a blob written before: %v", err)
	}
}

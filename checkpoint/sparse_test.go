package checkpoint_test

import (
	"crypto/rand"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/localblob"
)

// sparseTree writes DIR/sparse: size bytes, of which two 4 KiB regions
// of random data (at 1 MiB and at size-56 MiB) are all that is
// allocated. It returns the file's SHA-256.
func sparseTree(tb testing.TB, size int64) (dir string, sum [32]byte) {
	tb.Helper()
	dir = tb.TempDir()
	p := filepath.Join(dir, "sparse")
	f, err := os.Create(p)
	if err != nil {
		tb.Fatal(err)
	}
	for _, off := range []int64{1 << 20, size - 56<<20} {
		b := make([]byte, 4096)
		rand.Read(b)
		if _, err := f.WriteAt(b, off); err != nil {
			tb.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		tb.Fatal(err)
	}
	f.Close()
	if blocks := allocated(tb, p); blocks > 1<<20 {
		tb.Fatalf("the file system does not keep %s sparse (%d bytes allocated)", p, blocks)
	}
	return dir, fileSum(tb, p)
}

func allocated(tb testing.TB, p string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		tb.Fatal(err)
	}
	return st.Blocks * 512
}

func fileSum(tb testing.TB, p string) [32]byte {
	f, err := os.Open(p)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	return readSum(tb, f)
}

func readSum(tb testing.TB, r io.Reader) (sum [32]byte) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		tb.Fatal(err)
	}
	copy(sum[:], h.Sum(nil))
	return sum
}

// TestCheckpoint_Sparse: a 256 MiB file with two 4 KiB data regions is
// checkpointed into packs of a few KiB (its holes are recorded, not
// stored), read back through OpenFile with its content, and restored
// with the same content and its holes kept (st_blocks well under 1 MiB).
func TestCheckpoint_Sparse(t *testing.T) {
	const size = 256 << 20
	src, sum := sparseTree(t, size)
	blobs, err := localblob.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := newRepo(t, blobs, "acme", newKey(t))
	t0 := time.Now()
	res := mustCheckpoint(t, r, src, nil, "")
	t.Logf("checkpoint of a %d MiB sparse file: %v, %+v", size>>20, time.Since(t0), res.Stats)
	var packBytes int64
	for _, n := range packSizes(t, blobs, "acme") {
		packBytes += n
	}
	if res.Size != size || packBytes > 64<<10 {
		t.Errorf("checkpoint: size %d, pack bytes %d, want %d and at most 64 KiB", res.Size, packBytes, size)
	}
	snap := mustOpen(t, r, res)
	root, err := snap.Tree(t.Context(), res.Root)
	if err != nil {
		t.Fatal(err)
	}
	e, ok := root.Find("sparse")
	if !ok {
		t.Fatal("no entry sparse")
	}
	t.Logf("chunks: %+v", e.Chunks)
	rc, err := snap.OpenFile(t.Context(), e, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if got := readSum(t, rc); got != sum {
		t.Errorf("OpenFile reads other content than the file's")
	}
	rc.Close()

	dst := filepath.Join(t.TempDir(), "dst")
	t0 = time.Now()
	if err := snap.Restore(t.Context(), dst, checkpoint.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("restore: %v", time.Since(t0))
	p := filepath.Join(dst, "sparse")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := fileSum(t, p); got != sum || fi.Size() != size {
		t.Errorf("restored file: %d bytes, same content %v", fi.Size(), got == sum)
	}
	if blocks := allocated(t, p); blocks >= 1<<20 {
		t.Errorf("restored file allocates %d bytes, want its holes kept (under 1 MiB)", blocks)
	} else {
		t.Logf("pack bytes %d, restored st_blocks*512 %d", packBytes, blocks)
	}
}

// BenchmarkCheckpointSparse: a full checkpoint of one 256 MiB file with
// 8 KiB of data.
func BenchmarkCheckpointSparse(b *testing.B) {
	src, _ := sparseTree(b, 256<<20)
	blobs, err := localblob.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	r, err := checkpoint.NewRepo(blobs, "acme", make([]byte, 32))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := r.Checkpoint(b.Context(), src, nil, checkpoint.CheckpointOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

package checkpoint_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/bothyhq/bothy/checkpoint"
)

// TestRepo_Checkpoint runs the large round trip on each blob store: a full
// checkpoint and restore, then one-file changes that must write only what
// changed, then a diff and a restore with a stat cache.
func TestRepo_Checkpoint(t *testing.T) {
	nSmall, bigSize := 10000, 100<<20
	if testing.Short() {
		nSmall, bigSize = 1000, 10<<20
	}
	forEachBlobStore(t, func(t *testing.T, blobs testBlobs) {
		ctx := t.Context()
		src := filepath.Join(t.TempDir(), "src")
		t0 := time.Now()
		genTree(t, src, 1, nSmall, bigSize)
		t.Logf("generate: %v", time.Since(t0))
		cache := filepath.Join(t.TempDir(), "statcache")
		r := newRepo(t, blobs, "acme", newKey(t))

		t0 = time.Now()
		res1 := mustCheckpoint(t, r, src, nil, cache)
		t.Logf("full checkpoint: %v, %+v, %d packs", time.Since(t0), res1.Stats, len(res1.Packs))
		if res1.FileCount != int64(nSmall+3) || res1.Stats.FilesRead != res1.FileCount {
			t.Errorf("FileCount %d FilesRead %d, want %d", res1.FileCount, res1.Stats.FilesRead, nSmall+3)
		}
		if res1.Stats.Symlinks != 4 || res1.Stats.Skipped != 0 {
			t.Errorf("stats %+v", res1.Stats)
		}
		stored := packSizes(t, blobs, "acme")
		if len(stored) != len(res1.Packs) {
			t.Errorf("%d packs stored, result lists %d", len(stored), len(res1.Packs))
		}
		for name, size := range stored {
			if size > 32<<20 {
				t.Errorf("pack %s is %d bytes, over 32 MiB", name, size)
			}
		}

		t.Run("Restore", func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "dst")
			snap := mustOpen(t, newRepo(t, blobs, "acme", checkpoint.KeyOf(r)), res1)
			t0 := time.Now()
			if err := snap.Restore(ctx, dst, checkpoint.RestoreOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Logf("restore: %v", time.Since(t0))
			compareTrees(t, src, dst)
			chmodAll(dst)
		})

		// One small file at depth 2 changes.
		snap1 := mustOpen(t, r, res1)
		small := filepath.Join(src, "d03", "s4", "f00083.txt")
		newContent := make([]byte, 5000)
		for i := range newContent {
			newContent[i] = byte(i*7 + i/13)
		}
		writeFile(t, small, newContent, 0o644, baseTime.Add(time.Hour))
		time.Sleep(60 * time.Millisecond) // out of the racy window, so res2 caches it
		before := packSizes(t, blobs, "acme")
		t0 = time.Now()
		res2 := mustCheckpoint(t, r, src, snap1, cache)
		t.Logf("incremental checkpoint (1 small file): %v, %+v", time.Since(t0), res2.Stats)
		st := res2.Stats
		if st.FilesRead != 1 || st.NewBlobs != 1 || st.NewBlobBytes != 5000 || st.NewTrees != 3 {
			t.Errorf("one small file: stats %+v, want FilesRead 1, NewBlobs 1, NewBlobBytes 5000, NewTrees 3", st)
		}
		names, n := newPacks(before, packSizes(t, blobs, "acme"))
		if len(names) != 1 || n != st.PackBytes || n > 5000+4096 {
			t.Errorf("one small file: new packs %v (%d bytes), stats say %d", names, n, st.PackBytes)
		}

		// 100 bytes change in the middle of the big file (depth 1).
		snap2 := mustOpen(t, r, res2)
		f, err := os.OpenFile(filepath.Join(src, "big", "data.bin"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(make([]byte, 100), int64(bigSize/2)); err != nil {
			t.Fatal(err)
		}
		f.Close()
		time.Sleep(60 * time.Millisecond)
		before = packSizes(t, blobs, "acme")
		t0 = time.Now()
		res3 := mustCheckpoint(t, r, src, snap2, cache)
		t.Logf("incremental checkpoint (big file edit): %v, %+v", time.Since(t0), res3.Stats)
		st = res3.Stats
		if st.FilesRead != 1 || st.BytesRead != int64(bigSize) || st.NewBlobs < 1 || st.NewBlobs > 2 ||
			st.NewBlobBytes > 2*checkpoint.MaxChunkSize || st.NewTrees != 2 {
			t.Errorf("big file edit: stats %+v, want 1 file read, at most 2 new chunks, 2 new trees", st)
		}
		_, n = newPacks(before, packSizes(t, blobs, "acme"))
		if n != st.PackBytes || n > st.NewBlobBytes+4096 {
			t.Errorf("big file edit: %d new pack bytes, stats say %d, new blob bytes %d", n, st.PackBytes, st.NewBlobBytes)
		}

		// An unchanged tree reads nothing and writes nothing.
		snap3 := mustOpen(t, r, res3)
		res4 := mustCheckpoint(t, r, src, snap3, cache)
		if res4.Root != res3.Root || res4.Stats.FilesRead != 0 || res4.Stats.PacksWritten != 0 || !reflect.DeepEqual(res4.Packs, res3.Packs) {
			t.Errorf("unchanged: root %v->%v stats %+v", res3.Root, res4.Root, res4.Stats)
		}

		t.Run("Diff", func(t *testing.T) {
			changes, err := checkpoint.Diff(ctx, snap1, snap3)
			if err != nil {
				t.Fatal(err)
			}
			want := []checkpoint.Change{
				{Path: "big/data.bin", Kind: checkpoint.Modified},
				{Path: "d03/s4/f00083.txt", Kind: checkpoint.Modified},
			}
			if !reflect.DeepEqual(changes, want) {
				t.Errorf("Diff = %v, want %v", changes, want)
			}
		})

		t.Run("RestoreStatCache", func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "dst")
			rcache := filepath.Join(t.TempDir(), "cache")
			if err := snap3.Restore(ctx, dst, checkpoint.RestoreOptions{StatCache: rcache}); err != nil {
				t.Fatal(err)
			}
			compareTrees(t, src, dst)
			res := mustCheckpoint(t, r, dst, snap3, rcache)
			if res.Root != res3.Root || res.Stats.FilesRead != 0 {
				t.Errorf("checkpoint after restore: root %v want %v, stats %+v", res.Root, res3.Root, res.Stats)
			}
			chmodAll(dst)
		})
		chmodAll(src)
	})
}

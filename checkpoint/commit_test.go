package checkpoint_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
)

// setupComputer creates a tenant with a fresh key and a computer.
func setupComputer(t *testing.T, store bothy.Store, tenant string) []byte {
	t.Helper()
	key := newKey(t)
	if err := store.CreateTenant(t.Context(), &bothy.Tenant{ID: tenant, Name: tenant, HashKey: key}); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateComputer(t.Context(), &bothy.Computer{ID: "c1", TenantID: tenant, Profile: "standard"}); err != nil {
		t.Fatal(err)
	}
	return key
}

func commit(t *testing.T, store bothy.Store, tenant string, base int64, res *checkpoint.Result) (*bothy.Revision, error) {
	t.Helper()
	return store.CommitRevision(t.Context(), &bothy.CommitRequest{
		TenantID: tenant, ComputerID: "c1", Base: base,
		RootDigest: res.Root.String(), Packs: res.Packs, Size: res.Size, FileCount: res.FileCount,
		CreatedBy: "api:test",
	})
}

func TestRepo_Checkpoint_CommitRetry(t *testing.T) {
	forEachStore(t, func(t *testing.T, store bothy.Store, blobs testBlobs) {
		key := setupComputer(t, store, "acme")
		r := newRepo(t, blobs, "acme", key)
		src := filepath.Join(t.TempDir(), "src")
		genTree(t, src, 2, 300, 3<<20)
		cache := filepath.Join(t.TempDir(), "cache")
		res1 := mustCheckpoint(t, r, src, nil, cache)
		if _, err := commit(t, store, "acme", 0, res1); err != nil {
			t.Fatal(err)
		}
		snap1 := mustOpen(t, r, res1)

		writeFile(t, filepath.Join(src, "d01", "s2", "new.txt"), []byte("a new file\n"), 0o644, baseTime)
		writeFile(t, filepath.Join(src, "big", "data.bin"), []byte("now small"), 0o644, baseTime)
		time.Sleep(60 * time.Millisecond)
		res2 := mustCheckpoint(t, r, src, snap1, cache)
		if res2.Stats.PacksWritten != 1 {
			t.Fatalf("stats %+v, want 1 new pack", res2.Stats)
		}
		if _, err := commit(t, store, "acme", 0, res2); errCode(err) != bothy.ECONFLICT {
			t.Fatalf("commit with a stale base: %v, want ECONFLICT", err)
		}
		before := packSizes(t, blobs, "acme")
		retry := mustCheckpoint(t, r, src, snap1, cache)
		after := packSizes(t, blobs, "acme")
		if names, _ := newPacks(before, after); len(names) != 0 || retry.Stats.PacksWritten != 0 {
			t.Errorf("retry wrote packs %v (stats %+v), want none", names, retry.Stats)
		}
		if retry.Root != res2.Root || !reflect.DeepEqual(retry.Packs, res2.Packs) {
			t.Errorf("retry: root %v packs %v, want %v %v", retry.Root, retry.Packs, res2.Root, res2.Packs)
		}
		rev, err := commit(t, store, "acme", 1, retry)
		if err != nil {
			t.Fatal(err)
		}
		// The revision lists exactly the packs its tree reaches: the big
		// file's old chunks are gone, so not every pack of rev 1 stays.
		snap2, err := r.Open(t.Context(), rev.RootDigest, rev.Packs)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "dst")
		if err := snap2.Restore(t.Context(), dst, checkpoint.RestoreOptions{}); err != nil {
			t.Fatal(err)
		}
		compareTrees(t, src, dst)
		chmodAll(src)
		chmodAll(dst)
	})
}

func TestGC(t *testing.T) {
	forEachStore(t, func(t *testing.T, store bothy.Store, blobs testBlobs) {
		ctx := t.Context()
		key := setupComputer(t, store, "acme")
		r := newRepo(t, blobs, "acme", key)
		src := filepath.Join(t.TempDir(), "src")
		genTree(t, src, 3, 200, 0)
		res1 := mustCheckpoint(t, r, src, nil, "")
		if _, err := commit(t, store, "acme", 0, res1); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(src, "d02", "changed"), []byte("v2"), 0o644, baseTime)
		res2 := mustCheckpoint(t, r, src, mustOpen(t, r, res1), "")
		if _, err := commit(t, store, "acme", 1, res2); err != nil {
			t.Fatal(err)
		}
		// An in-flight checkpoint: uploaded, not committed.
		writeFile(t, filepath.Join(src, "d03", "inflight"), []byte("v3"), 0o644, baseTime)
		res3 := mustCheckpoint(t, r, src, mustOpen(t, r, res2), "")
		all := packSizes(t, blobs, "acme")
		referenced := map[string]bool{}
		for _, p := range append(res1.Packs, res2.Packs...) {
			referenced[p] = true
		}
		var unreferenced []string
		for p := range all {
			if !referenced[p] {
				unreferenced = append(unreferenced, p)
			}
		}
		if len(unreferenced) != 1 || !contains(res3.Packs, unreferenced[0]) {
			t.Fatalf("unreferenced packs %v, want the in-flight one of %v", unreferenced, res3.Packs)
		}

		res, err := checkpoint.GC(ctx, store, blobs, checkpoint.GCOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Deleted != 0 || res.Young != 1 || int(res.Packs) != len(all) {
			t.Errorf("GC within grace: %+v", res)
		}
		if _, err := checkpoint.GC(ctx, store, blobs, checkpoint.GCOptions{Grace: time.Minute}); errCode(err) != bothy.EINVALID {
			t.Errorf("GC with a grace below 2*MaxCommitAge: %v, want EINVALID", err)
		}
		res, err = checkpoint.GC(ctx, store, blobs, checkpoint.GCOptions{Now: time.Now().Add(2 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Deleted != 1 || int(res.Referenced) != len(all)-1 {
			t.Errorf("GC after grace: %+v", res)
		}
		left := packSizes(t, blobs, "acme")
		if _, ok := left[unreferenced[0]]; ok || len(left) != len(all)-1 {
			t.Errorf("after GC: %d packs left of %d, in-flight pack still there: %v", len(left), len(all), ok)
		}
		// Both committed revisions still restore.
		for _, res := range []*checkpoint.Result{res1, res2} {
			fresh := newRepo(t, blobs, "acme", key)
			dst := filepath.Join(t.TempDir(), "dst")
			if err := mustOpen(t, fresh, res).Restore(ctx, dst, checkpoint.RestoreOptions{}); err != nil {
				t.Errorf("restore after GC: %v", err)
			}
			chmodAll(dst)
		}
		chmodAll(src)
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestWriter_MaxCommitAge(t *testing.T) {
	blobs := blobStores(t)["localblob"](t)
	r := newRepo(t, blobs, "acme", newKey(t))
	now := time.Now()
	checkpoint.SetClock(r, func() time.Time { return now })
	snap, err := r.Open(t.Context(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	w := snap.NewWriter()
	chunks, _, err := w.WriteFile(t.Context(), strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTree(t.Context(), &checkpoint.Tree{Entries: []checkpoint.Entry{{Name: "a", Type: checkpoint.TypeFile, Mode: 0o644, Size: 5, Chunks: chunks}}}); err != nil {
		t.Fatal(err)
	}
	// The uploads happen during Finish; make the clock jump right after.
	checkpoint.SetClock(r, func() time.Time {
		now = now.Add(40 * time.Minute)
		return now
	})
	if _, err := w.Finish(t.Context()); errCode(err) != bothy.ECONFLICT {
		t.Errorf("Finish after MaxCommitAge: %v, want ECONFLICT", err)
	}
}

func TestSnapshot_Restore_Corrupt(t *testing.T) {
	forEachBlobStore(t, func(t *testing.T, blobs testBlobs) {
		ctx := t.Context()
		key := newKey(t)
		r := newRepo(t, blobs, "acme", key)
		src := filepath.Join(t.TempDir(), "src")
		genTree(t, src, 4, 50, 0)
		random := make([]byte, 300<<10)
		for i := range random {
			random[i] = byte(i*2654435761>>13) ^ byte(i>>7)
		}
		writeFile(t, filepath.Join(src, "victim.bin"), random, 0o644, baseTime)
		res := mustCheckpoint(t, r, src, nil, "")
		snap := mustOpen(t, r, res)
		root, err := snap.Tree(ctx, snap.Root())
		if err != nil {
			t.Fatal(err)
		}
		e, _ := root.Find("victim.bin")
		h := e.Chunks[0].Hash
		pack, off, n, ok := checkpoint.FrameOf(snap, h)
		if !ok {
			t.Fatal("victim chunk not found")
		}
		corruptByte(t, blobs, "packs/acme/"+pack, off+n/2)

		fresh := mustOpen(t, newRepo(t, blobs, "acme", key), res)
		err = fresh.Restore(ctx, filepath.Join(t.TempDir(), "dst"), checkpoint.RestoreOptions{})
		if errCode(err) != bothy.ECORRUPT || !strings.Contains(err.Error(), h.String()) || !strings.Contains(err.Error(), pack) {
			t.Errorf("restore of a corrupt pack: %v, want ECORRUPT naming %s in %s", err, h, pack)
		}
		rc, err := fresh.OpenFile(ctx, e, 0, -1)
		if err == nil {
			_, err = readAll(rc)
		}
		if errCode(err) != bothy.ECORRUPT || !strings.Contains(err.Error(), h.String()) {
			t.Errorf("OpenFile of a corrupt chunk: %v, want ECORRUPT naming %s", err, h)
		}
		chmodAll(src)
	})
}

func TestRepo_Tenants(t *testing.T) {
	blobs := blobStores(t)["localblob"](t)
	src := filepath.Join(t.TempDir(), "src")
	genTree(t, src, 5, 100, 0)
	ra := newRepo(t, blobs, "a", newKey(t))
	rb := newRepo(t, blobs, "b", newKey(t))
	resA := mustCheckpoint(t, ra, src, nil, "")
	resB := mustCheckpoint(t, rb, src, nil, "")
	if resA.Root == resB.Root {
		t.Error("two tenants got the same root digest")
	}
	for _, p := range resA.Packs {
		if contains(resB.Packs, p) {
			t.Errorf("two tenants share pack name %s", p)
		}
	}
	ta, err := mustOpen(t, ra, resA).Tree(t.Context(), resA.Root)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := mustOpen(t, rb, resB).Tree(t.Context(), resB.Root)
	if err != nil {
		t.Fatal(err)
	}
	ea, _ := ta.Find("tool.sh")
	eb, _ := tb.Find("tool.sh")
	if ea.Chunks[0].Hash == eb.Chunks[0].Hash {
		t.Error("two tenants got the same chunk address")
	}
	if ra.Hash([]byte("x")) == rb.Hash([]byte("x")) {
		t.Error("Repo.Hash is not keyed")
	}
	// A tenant's repo cannot open the other's revision.
	if _, err := ra.Open(t.Context(), resB.Root.String(), resB.Packs); err == nil {
		t.Error("tenant a opened tenant b's revision")
	}
	chmodAll(src)
}

func TestDiff(t *testing.T) {
	blobs := blobStores(t)["localblob"](t)
	r := newRepo(t, blobs, "acme", newKey(t))
	src := filepath.Join(t.TempDir(), "src")
	genTree(t, src, 6, 100, 0)
	a := mustOpen(t, r, mustCheckpoint(t, r, src, nil, ""))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(src, "d01", "s0", "f00001.txt"), []byte("changed"), 0o600, baseTime)
	must(os.Chmod(filepath.Join(src, "d02", "s0", "f00002.txt"), 0o700))
	must(os.Remove(filepath.Join(src, "d03", "s0", "f00003.txt")))
	writeFile(t, filepath.Join(src, "d04", "added.txt"), []byte("new"), 0o644, baseTime)
	must(os.RemoveAll(filepath.Join(src, "d05")))
	writeFile(t, filepath.Join(src, "newdir", "x"), nil, 0o644, baseTime)
	must(os.Remove(filepath.Join(src, "link-rel")))
	must(os.Symlink("elsewhere", filepath.Join(src, "link-rel")))
	must(os.Remove(filepath.Join(src, "tool.sh")))
	must(os.Mkdir(filepath.Join(src, "tool.sh"), 0o755))
	b := mustOpen(t, r, mustCheckpoint(t, r, src, a, ""))
	got, err := checkpoint.Diff(t.Context(), a, b)
	must(err)
	want := []checkpoint.Change{
		{"d01/s0/f00001.txt", checkpoint.Modified},
		{"d02/s0/f00002.txt", checkpoint.Modified},
		{"d03/s0/f00003.txt", checkpoint.Removed},
		{"d04/added.txt", checkpoint.Added},
		{"d05", checkpoint.Removed},
	}
	for i := 5; i < 100; i += 20 {
		want = append(want, checkpoint.Change{Path: "d05/s" + itoa(i/20%10), Kind: checkpoint.Removed},
			checkpoint.Change{Path: "d05/s" + itoa(i/20%10) + "/f000" + pad2(i) + ".txt", Kind: checkpoint.Removed})
	}
	want = append(want,
		checkpoint.Change{"link-rel", checkpoint.Modified},
		checkpoint.Change{"newdir", checkpoint.Added},
		checkpoint.Change{"newdir/x", checkpoint.Added},
		checkpoint.Change{"tool.sh", checkpoint.Modified},
	)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Diff:\n got %v\nwant %v", got, want)
	}
	if same, err := checkpoint.Diff(t.Context(), b, b); err != nil || len(same) != 0 {
		t.Errorf("Diff of a snapshot with itself: %v, %v", same, err)
	}
	chmodAll(src)
}

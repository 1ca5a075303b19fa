package bwrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/bwrap"
	"github.com/bothyhq/bothy/hostcache"
	"github.com/bothyhq/bothy/providertest"
	"github.com/bothyhq/bothy/testenv"
)

// writeLower creates dirs directories of files files of size bytes each.
func writeLower(tb testing.TB, dirs, files, size int) string {
	tb.Helper()
	lower := tb.TempDir()
	data := make([]byte, size)
	for d := range dirs {
		dir := filepath.Join(lower, fmt.Sprintf("d%03d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			tb.Fatal(err)
		}
		for f := range files {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), data, 0o644); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return lower
}

// countTree counts the entries under dir.
func countTree(tb testing.TB, dir string) (paths []string) {
	tb.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			paths = append(paths, strings.TrimPrefix(p, dir+"/"))
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return paths
}

// TestProvider_IDMappedWorkspace starts a sandbox over an overlay whose
// lower layer is idmapped to the lease's uid: Start copies nothing up, and
// a command can still change a lower file.
func TestProvider_IDMappedWorkspace(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	lower := writeLower(t, 20, 50, 100)
	leaseID := providertest.NewID("lease")
	uid, err := p.WorkspaceUID(ctx, leaseID)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := p.WorkspaceUID(ctx, leaseID); err != nil || again != uid {
		t.Fatalf("second WorkspaceUID: %d, %v; want %d", again, err, uid)
	}
	ov, err := hostcache.Mount(ctx, lower, t.TempDir(), hostcache.MountOptions{IDMapUID: uid})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ov.Remove(ctx); err != nil {
			t.Error(err)
		}
	})
	if !ov.IDMapped {
		t.Fatalf("overlay not idmapped: %v", ov.IDMapErr)
	}
	h, _ := providertest.Start(t, p, bothy.LeaseSpec{LeaseID: leaseID, Workspace: ov.Merged})
	var st struct{ UID int }
	if err := json.Unmarshal(h.State, &st); err != nil || st.UID != uid {
		t.Fatalf("sandbox uid %d (%v), want the reserved %d", st.UID, err, uid)
	}
	if up := countTree(t, ov.Upper); len(up) != 0 {
		t.Fatalf("Start copied %d entries up: %v", len(up), up[:min(len(up), 5)])
	}
	res, out, errOut := providertest.Exec(t, p, h, bothy.ExecSpec{Script: "id -u && echo changed >> d003/f007 && tail -c 8 d003/f007 && touch new"})
	if res.ExitCode != 0 || out != strconv.Itoa(uid)+"\nchanged\n" {
		t.Fatalf("result %+v stdout %q stderr %q", res, out, errOut)
	}
	if up, want := countTree(t, ov.Upper), []string{"d003", "d003/f007", "new"}; strings.Join(up, " ") != strings.Join(want, " ") {
		t.Fatalf("upper holds %v, want %v", up, want)
	}
	if fi, err := os.Stat(filepath.Join(lower, "d003/f007")); err != nil || fi.Size() != 100 {
		t.Fatalf("the lower file changed: %v", err)
	}
}

func TestProvider_WorkspaceUID(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	p, err := bwrap.New(bwrap.Options{StateDir: dir, UIDBase: 310000, UIDCount: 2, KillGrace: time.Second})
	if err != nil {
		testenv.Skip(t, "%v; run scripts/sandbox-deps as root", err)
	}
	ctx := context.Background()
	reserve := func(leaseID string) (int, error) { return p.WorkspaceUID(ctx, leaseID) }
	a, b, c := providertest.NewID("lease"), providertest.NewID("lease"), providertest.NewID("lease")
	ua, err := reserve(a)
	if err != nil {
		t.Fatal(err)
	}
	ub, err := reserve(b)
	if err != nil || ub == ua {
		t.Fatalf("second lease got %d, %v (first %d)", ub, err, ua)
	}
	if _, err := reserve(c); bothy.ErrorCode(err) != bothy.ECONFLICT {
		t.Fatalf("a full range: %v, want %s", err, bothy.ECONFLICT)
	}
	// b starts: its uid is the reserved one and is never reclaimed.
	h, _ := providertest.Start(t, p, bothy.LeaseSpec{LeaseID: b})
	var st struct{ UID int }
	if json.Unmarshal(h.State, &st); st.UID != ub {
		t.Fatalf("Start took uid %d, want the reserved %d", st.UID, ub)
	}
	old := time.Now().Add(-2 * time.Hour)
	for _, uid := range []int{ua, ub} {
		if err := os.Chtimes(filepath.Join(dir, "uids", strconv.Itoa(uid)), old, old); err != nil {
			t.Fatal(err)
		}
	}
	// a never started: after an hour its uid goes to c.
	if uc, err := reserve(c); err != nil || uc != ua {
		t.Fatalf("after a's reservation expired, c got %d, %v; want %d", uc, err, ua)
	}
	if _, err := reserve(a); bothy.ErrorCode(err) != bothy.ECONFLICT {
		t.Fatalf("a after losing its uid: %v, want %s (b's started lease keeps its uid)", err, bothy.ECONFLICT)
	}
	if _, err := reserve("../x"); bothy.ErrorCode(err) != bothy.EINVALID {
		t.Fatalf("invalid lease id: %v, want %s", err, bothy.EINVALID)
	}
}

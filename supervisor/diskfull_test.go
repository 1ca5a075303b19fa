package supervisor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/process"
	"github.com/bothyhq/bothy/supervisor"
	"github.com/bothyhq/bothy/testenv"
)

// TestJournal_DiskFull: a command prints more than its supervisor's disk
// (an 8 MiB tmpfs) holds. It must not end as if its output were whole: it
// is killed and ends with DiskFull (not Cancelled) in its exit record,
// which fits because the journal reserved room for it, and the events
// journaled until then read back in order.
func TestJournal_DiskFull(t *testing.T) {
	testenv.Root(t, "mounts a tmpfs")
	dir := t.TempDir()
	l := &lease{dir: dir, ws: filepath.Join(dir, "ws"), sup: filepath.Join(dir, "sup")}
	for _, d := range []string{l.ws, l.sup} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// Mounted before spawn: the unmount runs after the supervisor is
	// stopped.
	testenv.Tmpfs(t, l.sup, "size=8m,mode=0700")
	h, err := process.New().Start(context.Background(), bothy.LeaseSpec{LeaseID: "lease1", ComputerID: "comp1", Generation: 1, Workspace: l.ws})
	if err != nil {
		t.Fatal(err)
	}
	if err := supervisor.Init(l.sup, h); err != nil {
		t.Fatal(err)
	}
	_, c := l.spawn(t)
	// 20 MB of lines, far more than the journal and the archive fit in
	// 8 MiB, then a last line that must never be journaled.
	run(t, c, "big", bothy.RunSpec{Script: "yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 20000000; echo end"})
	evs := events(t, c, "big", 0)
	out := wantSeqs(t, evs, 0)
	x := exitOf(t, evs[len(evs)-1])
	if !x.DiskFull || x.Cancelled {
		t.Fatalf("exit %+v after %d bytes of output, want disk_full and not cancelled", x, len(out))
	}
	if strings.HasSuffix(out, "end\n") || len(out) == 0 || len(out) >= 8<<20 {
		t.Fatalf("%d bytes of output journaled (ends %q), want a prefix of what fits", len(out), out[max(0, len(out)-20):])
	}
	if want := strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyz\n", len(out)/37+1)[:len(out)]; out != want {
		t.Fatalf("journaled output is not a prefix of what was printed")
	}
	st := status(t, c, "big")
	if st.State != bothy.RunFinished || st.Exit == nil || !st.Exit.DiskFull || st.LastSeq != int64(len(evs)) {
		t.Fatalf("status %+v, want finished with disk_full at seq %d", st, len(evs))
	}
	// The ended journal gave its reserve back.
	var fi unix.Stat_t
	if err := unix.Stat(filepath.Join(l.sup, "commands", "big.journal"), &fi); err != nil {
		t.Fatal(err)
	}
	if fi.Blocks*512 > (fi.Size+4095)/4096*4096 {
		t.Errorf("the ended journal holds %d bytes allocated for %d bytes", fi.Blocks*512, fi.Size)
	}

	// A command for which no reserve fits is refused and leaves no trace.
	filler := filepath.Join(l.sup, "filler")
	if err := os.WriteFile(filler, make([]byte, 8<<20), 0o600); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("fill the tmpfs: %v, want ENOSPC", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Run(ctx, "refused", bothy.RunSpec{Script: "echo hi"}); bothy.ErrorCode(err) != bothy.EINSUFFICIENT {
		t.Fatalf("run on a full disk: %v, want %s", err, bothy.EINSUFFICIENT)
	}
	if st := status(t, c, "refused"); st.State != bothy.RunNeverSeen {
		t.Fatalf("a refused command is %s, want never_seen", st.State)
	}
	// Room again: the filler and the first command's archive go.
	os.Remove(filler)
	os.Remove(supervisor.ArchivePath(l.sup, "big"))
	run(t, c, "refused", bothy.RunSpec{Script: "echo hi"})
	evs = events(t, c, "refused", 0)
	if out := wantSeqs(t, evs, 0); out != "hi\n" {
		t.Fatalf("with room again: stdout %q", out)
	}
	if x := exitOf(t, evs[len(evs)-1]); x.DiskFull || x.ExitCode != 0 {
		t.Fatalf("with room again: exit %+v", x)
	}
}

package server_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/testenv"
)

// TestLeaseDiskFull writes a file into a running computer whose
// lease directory is on a full disk (the data directory on a 32 MiB tmpfs;
// the store and the blobs elsewhere, with room): the write is
// insufficient_storage, not internal, and works again once there is room.
func TestLeaseDiskFull(t *testing.T) {
	testenv.Root(t, "mounts a tmpfs")
	ctx := t.Context()
	e := startTmpfsRunPath(t, "32m")
	data := e.dir

	c := e.newComputer(t, "leasedisk")
	t.Cleanup(func() {
		// A failure before the destroy below must not leave the lease's
		// supervisor running on the unmounted tmpfs.
		if t.Failed() {
			e.client.DestroyComputer(context.Background(), c.ID)
			e.checkReleased(t, c.ID, 1)
		}
	})
	e.finish(t, e.run(t, c.ID, bothy.RunRequest{Script: "true", Wait: true}).ID, "", "")

	filler := filepath.Join(data, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, io.LimitReader(rand.NewChaCha8([32]byte{}), 64<<20)); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("fill the tmpfs: %v, want ENOSPC", err)
	}
	f.Close()
	const size = 1 << 20
	_, err = e.client.WriteFile(ctx, "", c.ID, "big.bin", io.LimitReader(rand.NewChaCha8([32]byte{1}), size), bothy.WriteOptions{})
	if code := bothy.ErrorCode(err); code != bothy.EINSUFFICIENT {
		t.Errorf("write 1 MiB into a running computer on a full disk: %v (code %q), want %s", err, code, bothy.EINSUFFICIENT)
	}
	if got := e.readFile(t, c.ID, "in.txt"); got != "hello\n" {
		t.Errorf("in.txt on a full disk = %q", got)
	}

	os.Remove(filler)
	if _, err := e.client.WriteFile(ctx, "", c.ID, "big.bin", io.LimitReader(rand.NewChaCha8([32]byte{1}), size), bothy.WriteOptions{}); err != nil {
		t.Errorf("write with room again: %v", err)
	}
	if _, err := e.client.DestroyComputer(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	e.checkReleased(t, c.ID, 1)
}

// TestLeaseDiskFull_Output runs a command that prints 80 MB into
// a computer whose lease directory is on a 32 MiB tmpfs: it must not end
// completed with its output silently cut. It ends failed with disk_full,
// its events up to there in order and its last line never journaled.
func TestLeaseDiskFull_Output(t *testing.T) {
	testenv.Root(t, "mounts a tmpfs")
	e := startTmpfsRunPath(t, "32m")
	c := e.newComputer(t, "leasedisk")
	t.Cleanup(func() {
		if t.Failed() {
			e.client.DestroyComputer(context.Background(), c.ID)
			e.checkReleased(t, c.ID, 1)
		}
	})
	const line = "0123456789abcdefghijklmnopqrstuvwxyz\n"
	cmd := e.run(t, c.ID, bothy.RunRequest{Script: "yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 80000000; echo end"})
	events, final := e.stream(t, cmd.ID, 0)
	if final == nil || final.State != bothy.CommandFailed || !final.DiskFull {
		t.Fatalf("command ended %+v, want failed with disk_full", final)
	}
	var out strings.Builder
	for i, ev := range events {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
		if ev.Kind == bothy.EventStdout {
			out.Write(ev.Data)
		}
	}
	last := events[len(events)-1]
	if last.Kind != bothy.EventExit || !strings.Contains(last.Fields, `"disk_full":true`) {
		t.Fatalf("last event %s %s, want an exit with disk_full", last.Kind, last.Fields)
	}
	got := out.String()
	if got == "" || strings.HasSuffix(got, "end\n") || got != strings.Repeat(line, len(got)/len(line)+1)[:len(got)] {
		t.Fatalf("%d bytes of stdout, want a prefix of what was printed, without its last line", len(got))
	}
	if _, err := e.client.DestroyComputer(t.Context(), c.ID); err != nil {
		t.Fatal(err)
	}
	e.checkReleased(t, c.ID, 1)
}

// startTmpfsRunPath starts a runPath whose data directory, where the
// leases live, is a tmpfs of size (a mount option: "32m"), unmounted at
// cleanup; the store and the blobs are elsewhere, with room.
func startTmpfsRunPath(t *testing.T, size string) *runPath {
	t.Helper()
	data := t.TempDir()
	testenv.Tmpfs(t, data, "size="+size)
	return newRunPath(t, data, t.TempDir(), "leasedisk")
}

package server_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/sqlite"
	"github.com/bothyhq/bothy/testenv"
)

// TestRunPath_LeaseDiskFull writes a file into a running computer whose
// lease directory is on a full disk (the data directory on a 32 MiB tmpfs;
// the store and the blobs elsewhere, with room): the write is
// insufficient_storage, not internal, and works again once there is room.
func TestRunPath_LeaseDiskFull(t *testing.T) {
	testenv.Root(t, "mounts a tmpfs")
	ctx := t.Context()
	data := t.TempDir()
	if err := unix.Mount("tmpfs", data, "tmpfs", 0, "size=32m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(data, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", data, err)
		}
	})
	meta := t.TempDir()
	e := &runPath{dir: data, stop: func() {}}
	var err error
	if e.store, err = sqlite.Open(ctx, filepath.Join(meta, "bothy.db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	if e.blobs, err = localblob.Open(filepath.Join(meta, "blobs")); err != nil {
		t.Fatal(err)
	}
	tenant, err := bothy.NewTenant("leasedisk", "leasedisk")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.CreateTenant(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	e.tenant = tenant.ID
	if _, e.token, err = e.store.CreateToken(ctx, tenant.ID, "leasedisk", []string{bothy.ScopeAdmin}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if e.exe, err = os.Executable(); err != nil {
		t.Fatal(err)
	}
	if e.logf, err = os.Create(filepath.Join(meta, "serve.log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.stop()
		if t.Failed() || testing.Verbose() {
			b, _ := os.ReadFile(e.logf.Name())
			t.Logf("server log:\n%s", b)
		}
		e.logf.Close()
	})
	e.start(t)

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

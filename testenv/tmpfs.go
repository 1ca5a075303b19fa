package testenv

import (
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs with options (such as "size=16m,mode=0700") on the
// existing directory dir, for a test that needs a small disk to fill, and
// unmounts it when the test and its later cleanups end (cleanups run last
// registered first, so register what must stop using dir after this).
// It needs root, and skips through Root without it.
func Tmpfs(tb testing.TB, dir, options string) {
	tb.Helper()
	Root(tb, "mounts a tmpfs")
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, options); err != nil {
		tb.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	tb.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			tb.Errorf("unmount %s: %v", dir, err)
		}
	})
}

package server

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
)

// DefaultMinFreeBytes is Config.MinFreeBytes's default.
const DefaultMinFreeBytes = 64 << 20

// diskCheck returns a /readyz check that fails with EINSUFFICIENT when the
// file system of dir has fewer than min bytes free for an unprivileged
// writer.
func diskCheck(dir string, min int64) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return fmt.Errorf("statfs %s: %w", dir, err)
		}
		if free := int64(st.Bavail) * st.Bsize; free < min {
			return bothy.Errorf(bothy.EINSUFFICIENT, "the data directory's disk has %d bytes free, under the %d it needs", free, min)
		}
		return nil
	}
}

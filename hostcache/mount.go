package hostcache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/mountinfo"
)

// Overlay is a lease's workspace: an overlay of a read-only cached tree
// (Lower) and the lease's writable layer (Upper). Merged is what a provider
// binds as /workspace.
type Overlay struct {
	Lower, Upper, Work, Merged string
	opts                       MountOptions
}

// MountOptions configures an overlay mount.
type MountOptions struct {
	// RedirectDir mounts with redirect_dir=on: renaming a directory that
	// exists in the lower layer is a real rename (an xattr in the upper
	// layer records where its lower contents are) instead of failing with
	// EXDEV, which makes mv(1) copy the whole directory up. Checkpoint
	// follows redirects either way.
	RedirectDir bool
}

// options is the overlay mount data. Features whose on-disk effects
// Checkpoint does not read are off explicitly, whatever the module's
// defaults: metacopy (a chmod would copy up metadata only, and the data
// would stay in the lower layer), index and xino.
func (o MountOptions) options(lower, upper, work string) string {
	redirect := "off"
	if o.RedirectDir {
		redirect = "on"
	}
	return fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=%s,metacopy=off,index=off,xino=off",
		lower, upper, work, redirect)
}

// Mount creates upper, work and merged under leaseDir and mounts the overlay
// of lower and upper on merged. If merged already holds an overlay of the
// same lower (after a restart of the calling process), Mount returns it
// without mounting again: the writable layer survives.
func Mount(ctx context.Context, lower, leaseDir string, opts MountOptions) (*Overlay, error) {
	var err error
	if lower, err = filepath.Abs(lower); err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	} else if leaseDir, err = filepath.Abs(leaseDir); err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	}
	if err := checkLayerPath(lower); err != nil {
		return nil, err
	} else if err := checkLayerPath(leaseDir); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(lower); err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	} else if !fi.IsDir() {
		return nil, bothy.Errorf(bothy.ENOTDIR, "mount: lower %s is not a directory", lower)
	}
	m := &Overlay{
		Lower:  lower,
		Upper:  filepath.Join(leaseDir, "upper"),
		Work:   filepath.Join(leaseDir, "work"),
		Merged: filepath.Join(leaseDir, "merged"),
		opts:   opts,
	}
	if err := os.MkdirAll(leaseDir, 0o700); err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{m.Upper, 0o755}, {m.Work, 0o700}, {m.Merged, 0o755}} {
		if err := os.Mkdir(d.path, d.mode); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("mount: %w", err)
		}
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	for _, mi := range mounts {
		if mi.Point != m.Merged {
			continue
		} else if mi.FSType == "overlay" && lowerdir(&mi) == lower {
			return m, nil
		}
		return nil, bothy.Errorf(bothy.ECONFLICT, "mount: %s already holds a %s mount", m.Merged, mi.FSType)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	data := opts.options(lower, m.Upper, m.Work)
	if err := unix.Mount("overlay", m.Merged, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return nil, fmt.Errorf("mount overlay on %s: %w", m.Merged, err)
	}
	return m, nil
}

// Unmount unmounts the overlay. It is idempotent. The layers stay on disk:
// Remove deletes them.
func (m *Overlay) Unmount(ctx context.Context) error {
	for {
		err := unix.Unmount(m.Merged, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
			continue // an overlay stacked twice by a racing Mount
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // not a mount point (any more)
		case errors.Is(err, unix.EINTR):
			continue
		default:
			return fmt.Errorf("unmount %s: %w", m.Merged, err)
		}
	}
}

// Remove unmounts the overlay and deletes the lease's layers (upper, work,
// merged and leaseDir itself).
func (m *Overlay) Remove(ctx context.Context) error {
	if err := m.Unmount(ctx); err != nil {
		return err
	}
	leaseDir := filepath.Dir(m.Merged)
	removeTree(leaseDir)
	if _, err := os.Lstat(leaseDir); err == nil {
		return fmt.Errorf("remove lease layers: %s is still there", leaseDir)
	}
	return nil
}

// checkLayerPath refuses paths that overlay mount data cannot carry
// unescaped (its options are split at ',' and lowerdir at ':') or that
// mountinfo escapes.
func checkLayerPath(p string) error {
	if strings.ContainsAny(p, ",:\\ \t\n") {
		return bothy.Errorf(bothy.EINVALID, "path %q holds a character overlayfs options cannot carry", p)
	}
	return nil
}

// mountedLowers returns the lower directories of every overlay mount.
func mountedLowers() (map[string]bool, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	lowers := make(map[string]bool)
	for _, mi := range mounts {
		if mi.FSType != "overlay" {
			continue
		}
		for _, l := range strings.Split(lowerdir(&mi), ":") {
			if l != "" {
				lowers[filepath.Clean(l)] = true
			}
		}
	}
	return lowers, nil
}

// OverlayMounts returns the mount points of overlay mounts whose mount
// point is under dir (tests and destroy check for residue with it).
func OverlayMounts(dir string) ([]string, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mi := range mounts {
		if mi.FSType == "overlay" && (mi.Point == dir || strings.HasPrefix(mi.Point, dir+"/")) {
			out = append(out, mi.Point)
		}
	}
	return out, nil
}

// lowerdir returns the lowerdir option of an overlay mount.
func lowerdir(m *mountinfo.Mount) string {
	v, _ := m.Option("lowerdir")
	return v
}

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
	// IDMapped reports that the overlay's lower layer is an idmapped clone
	// of Lower (at LEASEDIR/lower), so that every file of Merged appears
	// owned by MountOptions.IDMapUID. It is false when the option was not
	// given or the kernel refused it; IDMapErr then says why.
	IDMapped bool
	IDMapErr error
	opts     MountOptions
}

// MountOptions configures an overlay mount.
type MountOptions struct {
	// RedirectDir mounts with redirect_dir=on: renaming a directory that
	// exists in the lower layer is a real rename (an xattr in the upper
	// layer records where its lower contents are) instead of failing with
	// EXDEV, which makes mv(1) copy the whole directory up. Checkpoint
	// follows redirects either way.
	RedirectDir bool
	// IDMapUID, when not 0, presents the workspace owned by that host uid
	// and the gid of the same number, without a chown: the lower layer is
	// a read-only clone of the cached tree, idmapped so that on-disk uid
	// and gid 0 (the runtime's, which wrote the tree) appear as IDMapUID,
	// and the upper layer's root is owned by IDMapUID. A sandbox running
	// as that uid can then write any file; a file is copied up only when
	// it is written, and copied-up and new files are owned by IDMapUID on
	// disk in the upper layer (Checkpoint records no owners). If the
	// kernel refuses the idmapped lower, Mount mounts the plain overlay,
	// owned by root, and sets Overlay.IDMapErr.
	IDMapUID int
	// Volatile mounts with volatile: the overlay never syncs the upper
	// layer (no fsync of copied-up files, no sync at unmount). The
	// runtime checkpoints after every command, so a host crash loses only
	// what was written since the last checkpoint, and the kernel then
	// refuses to mount that upper layer again (its work/incompat/volatile
	// marker): the lease cannot be resumed, and its computer restarts from
	// its last revision. A restart of the agent alone finds the overlay
	// still mounted and keeps it.
	Volatile bool
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
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=%s,metacopy=off,index=off,xino=off",
		lower, upper, work, redirect)
	if o.Volatile {
		data += ",volatile"
	}
	return data
}

// Mount creates upper, work and merged under leaseDir and mounts the overlay
// of lower and upper on merged; with opts.IDMapUID the lower layer is an
// idmapped clone of lower mounted at leaseDir/lower. If merged already holds
// an overlay of the same lower, plain or through a clone idmapped to
// opts.IDMapUID (after a restart of the calling process), Mount returns it
// without mounting again: the writable layer survives. An overlay of
// another lower, or idmapped to another uid, is ECONFLICT.
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
	} else if opts.IDMapUID < 0 || opts.IDMapUID >= 1<<31 {
		return nil, bothy.Errorf(bothy.EINVALID, "mount: idmap uid %d is out of range", opts.IDMapUID)
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
	clone := filepath.Join(leaseDir, cloneName)
	for _, mi := range mounts {
		if mi.Point != m.Merged {
			continue
		} else if mi.FSType != "overlay" {
			return nil, bothy.Errorf(bothy.ECONFLICT, "mount: %s already holds a %s mount", m.Merged, mi.FSType)
		}
		switch lowerdir(&mi) {
		case lower:
			// A plain overlay satisfies an idmapped request too: it is the
			// fallback, or a mount whose owner the provider already set.
			return m, nil
		case clone:
			id, ok := statID(clone)
			want, _ := statID(lower)
			if uid, gid, _ := owner(clone); ok && id == want && opts.IDMapUID != 0 && uid == opts.IDMapUID && gid == opts.IDMapUID {
				m.IDMapped = true
				return m, nil
			}
			return nil, bothy.Errorf(bothy.ECONFLICT, "mount: %s holds an overlay of %s idmapped to another owner", m.Merged, lower)
		}
		return nil, bothy.Errorf(bothy.ECONFLICT, "mount: %s holds an overlay of another lower", m.Merged)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// A clone without its overlay is left by a crash between the two mounts.
	if err := unmountAll(clone); err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	}
	if opts.IDMapUID != 0 {
		if m.IDMapErr = m.mountIDMapped(clone, opts.IDMapUID); m.IDMapErr == nil {
			m.IDMapped = true
			return m, nil
		}
	}
	data := opts.options(lower, m.Upper, m.Work)
	if err := unix.Mount("overlay", m.Merged, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return nil, fmt.Errorf("mount overlay on %s: %w", m.Merged, err)
	}
	return m, nil
}

// mountIDMapped mounts the overlay over an idmapped clone of the lower tree,
// or leaves neither the clone nor the upper layer's owner behind.
func (m *Overlay) mountIDMapped(clone string, uid int) (err error) {
	if err := os.Mkdir(clone, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("idmap lower: %w", err)
	}
	// The merged root is the upper root: the sandbox must own it.
	if err := os.Chown(m.Upper, uid, uid); err != nil {
		return fmt.Errorf("idmap lower: %w", err)
	}
	defer func() {
		if err != nil {
			unmountAll(clone)
			os.Chown(m.Upper, 0, 0)
		}
	}()
	if err := idmapClone(m.Lower, clone, uid); err != nil {
		return fmt.Errorf("idmap lower: %w", err)
	}
	data := m.opts.options(clone, m.Upper, m.Work)
	if err := unix.Mount("overlay", m.Merged, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("mount overlay over idmapped lower %s: %w", clone, err)
	}
	return nil
}

// Unmount unmounts the overlay and its idmapped lower clone, if any. It is
// idempotent. The layers stay on disk: Remove deletes them.
func (m *Overlay) Unmount(ctx context.Context) error {
	// An overlay stacked twice by a racing Mount comes off in the loop.
	if err := unmountAll(m.Merged); err != nil {
		return err
	}
	return unmountAll(filepath.Join(filepath.Dir(m.Merged), cloneName))
}

// Remove unmounts the overlay and deletes the lease's layers (upper, work,
// merged and leaseDir itself).
func (m *Overlay) Remove(ctx context.Context) error {
	if err := m.Unmount(ctx); err != nil {
		return err
	}
	leaseDir := filepath.Dir(m.Merged)
	// Never delete through a mount: the clone is the shared cached tree.
	for _, p := range []string{m.Merged, filepath.Join(leaseDir, cloneName)} {
		if ok, err := mountinfo.Mounted(p); err != nil || ok {
			return fmt.Errorf("remove lease layers: %s is still mounted (%v)", p, err)
		}
	}
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

// mountedLowers returns the lower directories of every overlay mount, by
// path and by device and inode: an idmapped lower is a clone of a cached
// tree mounted elsewhere, with the tree's inode.
func mountedLowers() (map[string]bool, map[fileID]bool, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, nil, err
	}
	paths, ids := make(map[string]bool), make(map[fileID]bool)
	for _, mi := range mounts {
		if mi.FSType != "overlay" {
			continue
		}
		for _, l := range strings.Split(lowerdir(&mi), ":") {
			if l == "" {
				continue
			}
			paths[filepath.Clean(l)] = true
			if id, ok := statID(l); ok {
				ids[id] = true
			}
		}
	}
	return paths, ids, nil
}

// OverlayMounts returns the mount points of overlay mounts and of idmapped
// lower clones (LEASEDIR/lower) whose mount point is under dir (tests and
// destroy check for residue with it).
func OverlayMounts(dir string) ([]string, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mi := range mounts {
		under := mi.Point == dir || strings.HasPrefix(mi.Point, strings.TrimSuffix(dir, "/")+"/")
		if under && (mi.FSType == "overlay" || filepath.Base(mi.Point) == cloneName) {
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

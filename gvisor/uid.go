package gvisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
)

// The uid allocation is bwrap's (bwrap/bwrap.go), over a range of its own:
// one file per uid under StateDir/uids holding the lease id, created
// exclusively under a flock of the directory.

func (p *Provider) uidFile(uid int) string {
	return filepath.Join(p.opt.StateDir, "uids", strconv.Itoa(uid))
}

// allocateUID returns the uid held for leaseID, or takes the first free uid
// of the range. A reservation of a lease that never started (no lease
// directory) and was not touched for reservationTTL is free again.
func (p *Provider) allocateUID(leaseID string) (int, error) {
	dir := filepath.Join(p.opt.StateDir, "uids")
	d, err := os.Open(dir)
	if err != nil {
		return 0, fmt.Errorf("allocate uid: %w", err)
	}
	defer d.Close()
	for {
		if err = unix.Flock(int(d.Fd()), unix.LOCK_EX); err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("allocate uid: %w", err)
	}
	entries, err := d.ReadDir(-1)
	if err != nil {
		return 0, fmt.Errorf("allocate uid: %w", err)
	}
	taken := make(map[int]bool, len(entries))
	for _, e := range entries {
		uid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		taken[uid] = true
		b, err := os.ReadFile(p.uidFile(uid))
		if err != nil {
			continue
		}
		if string(b) == leaseID {
			now := time.Now()
			os.Chtimes(p.uidFile(uid), now, now)
			return uid, nil
		}
		if p.abandoned(uid, string(b)) && os.Remove(p.uidFile(uid)) == nil {
			delete(taken, uid)
		}
	}
	for uid := p.opt.UIDBase; uid < p.opt.UIDBase+p.opt.UIDCount; uid++ {
		if taken[uid] {
			continue
		}
		f, err := os.OpenFile(p.uidFile(uid), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		} else if err != nil {
			return 0, fmt.Errorf("allocate uid: %w", err)
		}
		_, err = f.WriteString(leaseID)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(f.Name())
			return 0, fmt.Errorf("allocate uid: %w", err)
		}
		return uid, nil
	}
	return 0, bothy.Errorf(bothy.ECONFLICT, "no free sandbox uid in %d-%d", p.opt.UIDBase, p.opt.UIDBase+p.opt.UIDCount-1)
}

// abandoned reports whether uid's reservation by leaseID is one that
// WorkspaceUID made for a lease that never started, long enough ago. No
// host process runs as a gVisor lease's uid, so the lease directory is the
// only sign of a started lease.
func (p *Provider) abandoned(uid int, leaseID string) bool {
	fi, err := os.Stat(p.uidFile(uid))
	if err != nil || time.Since(fi.ModTime()) < reservationTTL {
		return false
	}
	return leaseID == "" || !exists(filepath.Join(p.opt.StateDir, "leases", leaseID))
}

// chownTree gives every file of the workspace to the lease's uid, without
// following symlinks, unless the root is already the uid's (an idmapped
// overlay, see bothy.WorkspaceOwner, or an earlier chown that finished:
// the root is chowned last).
func chownTree(root string, uid int) error {
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		return fmt.Errorf("chown workspace: %w", err)
	} else if int(st.Uid) == uid && int(st.Gid) == uid {
		return nil
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		return os.Lchown(path, uid, uid)
	})
	if err == nil {
		err = os.Lchown(root, uid, uid)
	}
	if err != nil {
		return fmt.Errorf("chown workspace: %w", err)
	}
	return nil
}

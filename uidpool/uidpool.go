// Package uidpool reserves host uids for leases. A Pool is a range of
// uids, each held by at most one lease through a file under a state
// directory that is named by the uid and holds the lease id. A flock on the
// directory makes a lookup and a reservation one step across processes.
package uidpool

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

// Pool is the range of uids Base to Base+Count-1, reserved by files under
// Dir. It keeps no state in memory: any Pool with the same fields sees the
// same reservations.
type Pool struct {
	// Dir holds a file per reserved uid. It must exist.
	Dir string
	// Base and Count give the range.
	Base, Count int
	// TTL is how long a reservation stays held after it was last made or
	// renewed, whatever Live says.
	TTL time.Duration
	// Live reports whether the reservation of uid by leaseID ("" if its
	// file is empty) still belongs to a lease that lives. Reserve frees a
	// reservation older than TTL for which it returns false.
	Live func(uid int, leaseID string) bool
}

func (p *Pool) file(uid int) string {
	return filepath.Join(p.Dir, strconv.Itoa(uid))
}

// Reserve returns the uid held for leaseID, renewing its reservation, or
// takes the first free uid of the range by creating its file exclusively,
// which holds the lease id. The file's mtime is the last time the lease was
// given its uid. A full range is a bothy.ECONFLICT error.
func (p *Pool) Reserve(leaseID string) (int, error) {
	d, err := os.Open(p.Dir)
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
		b, err := os.ReadFile(p.file(uid))
		if err != nil {
			continue
		}
		if string(b) == leaseID {
			now := time.Now()
			os.Chtimes(p.file(uid), now, now)
			return uid, nil
		}
		if p.abandoned(uid, string(b)) && os.Remove(p.file(uid)) == nil {
			delete(taken, uid)
		}
	}
	for uid := p.Base; uid < p.Base+p.Count; uid++ {
		if taken[uid] {
			continue
		}
		f, err := os.OpenFile(p.file(uid), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
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
	return 0, bothy.Errorf(bothy.ECONFLICT, "no free sandbox uid in %d-%d", p.Base, p.Base+p.Count-1)
}

// abandoned reports whether uid's reservation by leaseID was not renewed
// for TTL and belongs to no live lease.
func (p *Pool) abandoned(uid int, leaseID string) bool {
	fi, err := os.Stat(p.file(uid))
	if err != nil || time.Since(fi.ModTime()) < p.TTL {
		return false
	}
	return !p.Live(uid, leaseID)
}

// Holds reports whether uid is reserved for leaseID.
func (p *Pool) Holds(uid int, leaseID string) bool {
	b, err := os.ReadFile(p.file(uid))
	return err == nil && string(b) == leaseID
}

// Release frees uid. Releasing a free uid does nothing.
func (p *Pool) Release(uid int) {
	os.Remove(p.file(uid))
}

// Chown gives every file of the tree at root to uid, as owner and group,
// without following symlinks, unless root already is uid's: the caller
// presents the tree so (an idmapped overlay, see bothy.WorkspaceOwner), or
// an earlier Chown of this tree finished, since root is chowned last.
func Chown(root string, uid int) error {
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

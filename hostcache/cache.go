// Package hostcache is the runtime's data path on one host: it materializes
// revisions read-only in a cache keyed by tenant and root digest, gives each
// lease a writable overlayfs layer on top (a warm start is a mount, not a
// copy), and checkpoints a lease by scanning only its writable layer and
// whiteouts. docs/data-path.md describes the layout and its rules. Where
// the agent is not root, a lease's workspace can instead be a plain copy of
// the base revision (Copy), checkpointed by a full scan with a stat cache.
package hostcache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
)

// DefaultMinAge is how long after its last Materialize a cached tree is
// never evicted, so that a caller between Materialize and Mount (in this
// process or another) keeps its tree.
const DefaultMinAge = time.Minute

// Cache is a host directory of materialized revisions:
// DIR/<tenant>/<root digest> is the complete tree of that root, and
// DIR/<tenant>/<root digest>.used records its size and, by its mtime, its
// last use. Several processes may share one Cache directory. Trees are
// read-only by convention: nothing in this package writes into a tree after
// it is renamed into place, and overlay mounts use it only as a lower layer.
// File and directory modes stay exactly as stored, because the overlay shows
// them to the workspace.
type Cache struct {
	dir string
	// MinAge protects recently materialized trees from Evict (0 = DefaultMinAge).
	MinAge time.Duration
	// MaxBytes, if above 0, bounds the cache: after each restore,
	// Materialize evicts least recently used trees (Evict) until the
	// cache holds at most MaxBytes, never the tree it restored nor one a
	// mounted overlay uses. The cache may stay over it while every tree
	// is in use or young.
	MaxBytes int64
	// Logger, if set, is told what a bounded Materialize evicted.
	Logger *slog.Logger

	mu       sync.Mutex
	inflight map[string]*flight

	hits, restores, waits atomic.Int64
}

// flight is one restore in progress in this process.
type flight struct {
	done chan struct{}
	dir  string
	err  error
}

// CacheStats counts what a Cache did since Open.
type CacheStats struct {
	Hits     int64 // Materialize found the tree in place
	Restores int64 // Materialize restored a tree
	Waits    int64 // Materialize waited for a restore by another goroutine
}

// Open returns the cache in dir, creating it (mode 0700: only the runtime
// reads the cache; sandboxes see trees only through their overlay). It
// removes temporary trees left by processes that are gone.
func Open(dir string) (*Cache, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open host cache: %w", err)
	}
	if err := checkLayerPath(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open host cache: %w", err)
	}
	c := &Cache{dir: dir, inflight: make(map[string]*flight)}
	tenants, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("open host cache: %w", err)
	}
	for _, t := range tenants {
		if !t.IsDir() {
			continue
		}
		names, _ := os.ReadDir(filepath.Join(dir, t.Name()))
		for _, n := range names {
			if pid, ok := tempOwner(n.Name()); ok && !alive(pid) {
				removeTree(filepath.Join(dir, t.Name(), n.Name()))
			}
		}
	}
	return c, nil
}

// Dir returns the cache directory.
func (c *Cache) Dir() string { return c.dir }

// Stats returns the counters of this Cache value.
func (c *Cache) Stats() CacheStats {
	return CacheStats{Hits: c.hits.Load(), Restores: c.restores.Load(), Waits: c.waits.Load()}
}

// Path returns where the tree of root would be, whether or not it is cached.
func (c *Cache) Path(tenantID string, root checkpoint.Hash) string {
	return filepath.Join(c.dir, tenantID, root.String())
}

// Materialize returns the directory holding the complete tree of snap,
// restoring it first when it is not cached. Concurrent calls for one root
// restore once per process; across processes each restores into its own
// temporary directory and renameat2(RENAME_NOREPLACE) picks one winner, the
// loser's copy is deleted. The tenant names the cache's subdirectory (the
// root digest is keyed by the tenant, so it cannot collide across tenants,
// but per-tenant directories make a tenant's trees easy to drop).
func (c *Cache) Materialize(ctx context.Context, tenantID string, snap *checkpoint.Snapshot) (string, error) {
	if err := bothy.ValidateID("tenant id", tenantID); err != nil {
		return "", err
	}
	final := c.Path(tenantID, snap.Root())
	if ok, err := c.lookup(final); err != nil || ok {
		if ok {
			c.hits.Add(1)
		}
		return final, err
	}
	c.mu.Lock()
	if f := c.inflight[final]; f != nil {
		c.mu.Unlock()
		c.waits.Add(1)
		select {
		case <-f.done:
			return f.dir, f.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{}), dir: final}
	c.inflight[final] = f
	c.mu.Unlock()
	f.err = c.restore(ctx, snap, final)
	c.mu.Lock()
	delete(c.inflight, final)
	c.mu.Unlock()
	close(f.done)
	if f.err == nil && c.MaxBytes > 0 {
		c.bound(ctx, tenantID, snap.Root().String())
	}
	return final, f.err
}

// bound evicts down to MaxBytes, keeping the tree just materialized.
func (c *Cache) bound(ctx context.Context, tenantID, root string) {
	keep := func(t, r string) bool { return t == tenantID && r == root }
	res, err := c.Evict(ctx, keep, c.MaxBytes)
	if c.Logger == nil {
		return
	}
	if err != nil {
		c.Logger.Warn("host cache eviction", "err", err)
	} else if res.Evicted > 0 || res.Bytes-res.EvictedBytes > c.MaxBytes {
		c.Logger.Info("host cache eviction", "trees", res.Trees, "bytes", res.Bytes, "evicted", res.Evicted,
			"evicted_bytes", res.EvictedBytes, "in_use", res.InUse, "young", res.Young, "max_bytes", c.MaxBytes)
	}
}

// lookup reports whether the tree final is in place and, if so, records
// its use, under the shared cache lock so Evict never removes it between
// the check and the record.
func (c *Cache) lookup(final string) (bool, error) {
	unlock, err := c.lock(unix.LOCK_SH)
	if err != nil {
		return false, err
	}
	defer unlock()
	if _, err := os.Lstat(final); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("materialize: %w", err)
	}
	now := time.Now()
	if err := os.Chtimes(final+".used", now, now); errors.Is(err, fs.ErrNotExist) {
		// A tree without its record (a crash between rename and record): size it again.
		_ = writeUsed(final, treeBytes(final))
	}
	return true, nil
}

// restore writes snap into a temporary directory and renames it to final.
func (c *Cache) restore(ctx context.Context, snap *checkpoint.Snapshot, final string) error {
	parent := filepath.Dir(final)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("materialize: %w", err)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(parent, fmt.Sprintf(".tmp-%d-%s-%s", os.Getpid(), hex.EncodeToString(rnd[:]), filepath.Base(final)))
	if err := snap.Restore(ctx, tmp, checkpoint.RestoreOptions{}); err != nil {
		removeTree(tmp)
		return fmt.Errorf("materialize %s: %w", snap.Root(), err)
	}
	// Restore may leave the root 0700; the merged root's mode comes from the
	// upper layer anyway, and the root's mode is not part of a checkpoint.
	size := treeBytes(tmp)
	unlock, err := c.lock(unix.LOCK_SH)
	if err != nil {
		removeTree(tmp)
		return err
	}
	defer unlock()
	err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
		// Another process won; its tree has the same content.
		removeTree(tmp)
		now := time.Now()
		os.Chtimes(final+".used", now, now)
		return nil
	} else if err != nil {
		removeTree(tmp)
		return fmt.Errorf("materialize: %w", err)
	}
	c.restores.Add(1)
	return writeUsed(final, size)
}

// writeUsed records the tree's size in bytes; the file's mtime is its last use.
func writeUsed(final string, size int64) error {
	if err := os.WriteFile(final+".used", []byte(strconv.FormatInt(size, 10)+"\n"), 0o600); err != nil {
		return fmt.Errorf("materialize: %w", err)
	}
	return nil
}

// treeBytes is the disk usage of a tree (allocated blocks), 0 on error.
func treeBytes(dir string) int64 {
	return sumTree(dir, func(st *syscall.Stat_t) int64 { return st.Blocks * 512 })
}

// apparentBytes is what a tree takes if every file's holes were written:
// each entry's larger of its size and its allocated blocks. The scratch
// limit counts this, so that a sparse file (truncate -s 1000G) costs what
// it would take written out.
func apparentBytes(dir string) int64 {
	return sumTree(dir, func(st *syscall.Stat_t) int64 { return max(st.Size, st.Blocks*512) })
}

// sumTree sums f over the lstat of every entry of a tree, skipping those
// it cannot stat.
func sumTree(dir string, f func(*syscall.Stat_t) int64) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		var st syscall.Stat_t
		if err == nil && syscall.Lstat(p, &st) == nil {
			n += f(&st)
		}
		return nil
	})
	return n
}

// lock takes the cache-wide flock: shared for Materialize's check and
// rename, exclusive for Evict.
func (c *Cache) lock(how int) (func(), error) {
	f, err := os.OpenFile(filepath.Join(c.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("host cache lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("host cache lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// EvictResult counts what Evict saw and removed.
type EvictResult struct {
	Trees, Bytes               int64 // cached trees and their bytes before eviction
	Evicted, EvictedBytes      int64
	InUse, Kept, Young, Failed int64 // trees skipped, by reason
}

// Evict removes least recently used trees until the cache holds at most
// maxBytes. It never removes a tree that keep(tenantID, root) wants, one
// that is the lower layer of a mounted overlay, directly or through an
// idmapped clone (per this process's /proc/self/mountinfo, so a mount
// outlives the process that made it), or
// one materialized less than MinAge ago (covering the step between
// Materialize and Mount, in any process sharing the cache).
func (c *Cache) Evict(ctx context.Context, keep func(tenantID, root string) bool, maxBytes int64) (EvictResult, error) {
	var res EvictResult
	unlock, err := c.lock(unix.LOCK_EX)
	if err != nil {
		return res, err
	}
	defer unlock()
	type tree struct {
		tenant, root, path string
		used               time.Time
		size               int64
	}
	var trees []tree
	tenants, err := os.ReadDir(c.dir)
	if err != nil {
		return res, fmt.Errorf("evict: %w", err)
	}
	for _, t := range tenants {
		if !t.IsDir() {
			continue
		}
		names, err := os.ReadDir(filepath.Join(c.dir, t.Name()))
		if err != nil {
			return res, fmt.Errorf("evict: %w", err)
		}
		for _, n := range names {
			if _, err := checkpoint.ParseHash(n.Name()); err != nil || !n.IsDir() {
				continue
			}
			p := filepath.Join(c.dir, t.Name(), n.Name())
			tr := tree{tenant: t.Name(), root: n.Name(), path: p}
			if fi, err := os.Stat(p + ".used"); err == nil {
				tr.used = fi.ModTime()
				b, _ := os.ReadFile(p + ".used")
				tr.size, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			} else {
				tr.size = treeBytes(p)
			}
			trees = append(trees, tr)
			res.Trees++
			res.Bytes += tr.size
		}
	}
	slices.SortFunc(trees, func(a, b tree) int { return a.used.Compare(b.used) })
	lowers, lowerIDs, err := mountedLowers()
	if err != nil {
		return res, err
	}
	minAge := c.MinAge
	if minAge <= 0 {
		minAge = DefaultMinAge
	}
	total := res.Bytes
	for _, tr := range trees {
		if total <= maxBytes {
			break
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		switch {
		case keep != nil && keep(tr.tenant, tr.root):
			res.Kept++
		case lowers[tr.path] || lowerIDs[treeID(tr.path)]:
			res.InUse++
		case time.Since(tr.used) < minAge:
			res.Young++
		default:
			// Rename first, so the tree disappears at once and a partly
			// removed one is never mistaken for a complete tree.
			trash := filepath.Join(filepath.Dir(tr.path), fmt.Sprintf(".tmp-%d-evict-%s", os.Getpid(), tr.root))
			if err := os.Rename(tr.path, trash); err != nil {
				res.Failed++
				continue
			}
			os.Remove(tr.path + ".used")
			removeTree(trash)
			total -= tr.size
			res.Evicted++
			res.EvictedBytes += tr.size
		}
	}
	return res, nil
}

func treeID(p string) fileID {
	id, _ := statID(p)
	return id
}

// removeTree removes a tree whose directories may be read-only (for a
// process without CAP_DAC_OVERRIDE).
func removeTree(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(dir)
}

// tempOwner parses the pid out of a ".tmp-<pid>-..." name.
func tempOwner(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, ".tmp-")
	if !ok {
		return 0, false
	}
	pidStr, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	return pid, err == nil && pid > 0
}

// alive reports whether process pid exists.
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || err == unix.EPERM
}

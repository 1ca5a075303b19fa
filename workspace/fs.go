// Package workspace implements bothy.FileService on a cold computer: it
// reads and rewrites the Merkle trees of the committed revision in the
// Store and BlobStore, with no runtime, and commits each mutation (or batch)
// as one new revision by compare-and-swap.
//
// Paths are confined to the workspace. A caller's path is cleaned by
// CleanPath ("..", NUL and over-long paths or names are EINVALIDPATH).
// While a path is walked, symlinks are followed only inside the workspace:
// a symlink whose target is absolute (unless under Options.MountPoint) or
// climbs above the root through "..", counts as pointing outside, and any
// path that would pass through it is EINVALIDPATH, as is a chain of more
// than 40 symlinks. Lstat, Readlink, Remove, Rename and Symlink act on a
// final symlink itself; Stat, ReadFile, WriteFile, ReadDir and Chmod follow
// it. Glob and Grep never descend through symlinks.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
)

// Defaults of Options.
const (
	DefaultMaxFileSize  = 1 << 30
	DefaultMaxBatch     = 1000
	DefaultMaxGrepBytes = 256 << 20
	DefaultRetries      = 8
)

// Options are the limits of an FS. Zero values take the defaults.
type Options struct {
	MaxFileSize  int64 // largest file WriteFile or a batch writes; default 1 GiB
	MaxBatch     int   // most operations in one Apply; default 1000
	MaxGrepBytes int64 // most file bytes one Grep reads; default 256 MiB
	MaxPath      int   // longest path in bytes; default and maximum 4096
	MaxName      int   // longest name in bytes; default and maximum 255
	// MountPoint, if set (for example "/workspace"), is where runtimes mount
	// the workspace: an absolute symlink target under it resolves inside the
	// workspace. Empty means every absolute target points outside.
	MountPoint string
	// Retries is how many times a mutation that lost a commit race is
	// re-run on the new revision before ECONFLICT; default 8.
	Retries int
}

// A Committer commits the revision a mutation made. req is on top of the
// computer's current revision, c.Revision (req.Base), and its packs hold
// every object of req.RootDigest. ECONFLICT re-runs the mutation on the
// computer's new revision, up to Options.Retries times.
type Committer func(ctx context.Context, c *bothy.Computer, req *bothy.CommitRequest) (*bothy.Revision, error)

// RuntimeOwned reports whether a runtime owns c's workspace, or is about
// to: a revision committed to the store would be lost under its writable
// layer, so only the runtime may commit one.
func RuntimeOwned(c *bothy.Computer) bool {
	return c.State != bothy.StateCold && c.State != bothy.StateFailed
}

// FS is the file service of cold workspaces.
type FS struct {
	store  bothy.Store
	blobs  bothy.BlobStore
	opts   Options
	commit Committer // nil: the store, and ECONFLICT when RuntimeOwned
}

var _ bothy.FileService = (*FS)(nil)

// New returns an FS over store and blobs.
func New(store bothy.Store, blobs bothy.BlobStore, opts Options) *FS {
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = DefaultMaxFileSize
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.MaxGrepBytes <= 0 {
		opts.MaxGrepBytes = DefaultMaxGrepBytes
	}
	if opts.MaxPath <= 0 || opts.MaxPath > DefaultMaxPath {
		opts.MaxPath = DefaultMaxPath
	}
	if opts.MaxName <= 0 || opts.MaxName > DefaultMaxName {
		opts.MaxName = DefaultMaxName
	}
	if opts.Retries <= 0 {
		opts.Retries = DefaultRetries
	}
	opts.MountPoint = strings.TrimRight(opts.MountPoint, "/")
	return &FS{store: store, blobs: blobs, opts: opts}
}

// CommitVia returns a copy of f whose mutations are committed by commit,
// for a computer in any state: commit decides where each revision goes
// (control.Files sends those of RuntimeOwned computers to the runtime).
func (f *FS) CommitVia(commit Committer) *FS {
	g := *f
	g.commit = commit
	return &g
}

// clean is CleanPath with the FS's limits.
func (f *FS) clean(p string) (string, error) {
	return cleanPath(p, f.opts.MaxPath, f.opts.MaxName)
}

// linkTarget returns the part of a symlink target to resolve, and whether
// to resolve it from the root rather than from the link's directory.
func (f *FS) linkTarget(p, target string) (string, bool, error) {
	switch {
	case target == "":
		return "", false, bothy.Errorf(bothy.ENOTFOUND, "path %q goes through an empty symlink", p)
	case !strings.HasPrefix(target, "/"):
		return target, false, nil
	case f.opts.MountPoint != "" && (target == f.opts.MountPoint || strings.HasPrefix(target, f.opts.MountPoint+"/")):
		return target[len(f.opts.MountPoint):], true, nil
	}
	return "", false, bothy.Errorf(bothy.EINVALIDPATH, "path %q goes through a symlink to %q, outside the workspace", p, target)
}

// state is what a transaction starts from.
type state struct {
	computer *bothy.Computer
	base     *bothy.Revision // nil at revision 0
	snap     *checkpoint.Snapshot
}

// current returns the computer's current revision.
func (s *state) current() *bothy.Revision {
	if s.base != nil {
		return s.base
	}
	c := s.computer
	return &bothy.Revision{TenantID: c.TenantID, ComputerID: c.ID, Generation: c.Generation}
}

// open reads the computer's current revision.
func (f *FS) open(ctx context.Context, tenantID, computerID string) (*state, error) {
	c, err := f.store.FindComputer(ctx, tenantID, computerID)
	if err != nil {
		return nil, fmt.Errorf("find computer: %w", err)
	} else if c.State == bothy.StateDestroyed {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "computer %q is destroyed", computerID)
	}
	tenant, err := f.store.FindTenant(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("find tenant: %w", err)
	}
	repo, err := checkpoint.NewRepo(f.blobs, tenantID, tenant.HashKey)
	if err != nil {
		return nil, fmt.Errorf("open repo: %w", err)
	}
	st := &state{computer: c}
	if st.snap, st.base, err = repo.OpenRevision(ctx, f.store, computerID, c.Revision); err != nil {
		return nil, err
	}
	return st, nil
}

// begin starts a transaction on st; write adds a Writer.
func (f *FS) begin(ctx context.Context, st *state, write bool) (*txn, error) {
	t := &txn{fs: f, snap: st.snap, now: bothy.Now().UnixNano()}
	if st.base == nil {
		t.root = newDir(checkpoint.Hash{}, nil)
	} else {
		var err error
		if t.root, err = t.load(ctx, st.snap.Root()); err != nil {
			return nil, err
		}
	}
	if write {
		t.w = st.snap.NewWriter()
	}
	return t, nil
}

// read starts a read transaction on the current revision.
func (f *FS) read(ctx context.Context, tenantID, computerID string) (*txn, error) {
	st, err := f.open(ctx, tenantID, computerID)
	if err != nil {
		return nil, err
	}
	return f.begin(ctx, st, false)
}

// mutate runs apply on the current revision and commits the result as one
// revision created by "api:"+op. When the commit loses a race, it runs
// apply again on the new revision (so preconditions are checked again), up
// to Options.Retries times. apply must be safe to re-run: file content it
// uploads is cached by the content type, and the packs of earlier attempts
// are kept in the commit so the cached chunks stay reachable.
func (f *FS) mutate(ctx context.Context, tenantID, computerID, op string, apply func(context.Context, *txn) error) (*bothy.Revision, error) {
	var earlier []string
	for attempt := 0; ; attempt++ {
		st, err := f.open(ctx, tenantID, computerID)
		if err != nil {
			return nil, err
		}
		if f.commit == nil && RuntimeOwned(st.computer) {
			return nil, bothy.Errorf(bothy.ECONFLICT, "computer %q is %s; change its files through its runtime", computerID, st.computer.State)
		}
		t, err := f.begin(ctx, st, true)
		if err != nil {
			return nil, err
		}
		if err := apply(ctx, t); err != nil {
			return nil, err
		}
		root, changed, err := t.flush(ctx, t.root)
		if err != nil {
			return nil, err
		} else if !changed {
			return st.current(), nil
		}
		packs, err := t.w.Finish(ctx)
		if err != nil {
			return nil, fmt.Errorf("finish packs: %w", err)
		}
		packs = mergePacks(packs, earlier)
		base := st.current()
		req := &bothy.CommitRequest{
			TenantID:   tenantID,
			ComputerID: computerID,
			Generation: st.computer.Generation,
			Base:       st.computer.Revision,
			RootDigest: root.String(),
			Packs:      packs,
			Size:       max(base.Size+t.sizeDelta, 0),
			FileCount:  max(base.FileCount+t.filesDelta, 0),
			CreatedBy:  "api:" + op,
		}
		var rev *bothy.Revision
		if f.commit != nil {
			rev, err = f.commit(ctx, st.computer, req)
		} else {
			rev, err = f.store.CommitRevision(ctx, req)
		}
		if err == nil {
			return rev, nil
		} else if bothy.ErrorCode(err) != bothy.ECONFLICT || attempt >= f.opts.Retries {
			return nil, fmt.Errorf("commit revision: %w", err)
		}
		earlier = packs
		if err := backoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

// backoff sleeps a jittered, growing delay before retry attempt+1.
func backoff(ctx context.Context, attempt int) error {
	d := time.Duration(2<<min(attempt, 6)) * time.Millisecond
	d = d/2 + rand.N(d)
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// mergePacks returns the sorted union of a and b.
func mergePacks(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// content is a file's content to write. It is uploaded once, when a
// mutation first needs it, and reused if the mutation is retried.
type content struct {
	r      io.Reader
	max    int64
	done   bool
	chunks []checkpoint.Chunk
	size   int64
}

// write uploads the content with w, or returns the earlier upload.
func (c *content) write(ctx context.Context, w *checkpoint.Writer) ([]checkpoint.Chunk, int64, error) {
	if c.done {
		return c.chunks, c.size, nil
	}
	lr := &limitReader{r: c.r, left: c.max}
	chunks, size, err := w.WriteFile(ctx, lr)
	if lr.over {
		return nil, 0, errTooLarge(c.max)
	} else if err != nil {
		return nil, 0, fmt.Errorf("write file content: %w", err)
	}
	c.chunks, c.size, c.done = chunks, size, true
	c.r = nil
	return chunks, size, nil
}

func errTooLarge(max int64) error {
	return bothy.Errorf(bothy.ETOOLARGE, "file is over the limit of %d bytes", max)
}

// limitReader fails as soon as more than left bytes are read, so an
// oversized stream is refused without reading it all.
type limitReader struct {
	r    io.Reader
	left int64
	over bool
}

var errOver = errors.New("over the size limit")

func (l *limitReader) Read(p []byte) (int, error) {
	if l.over {
		return 0, errOver
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	if int64(n) > l.left {
		l.over = true
		return 0, errOver
	}
	l.left -= int64(n)
	return n, err
}

package workspace_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/gcs/gcstest"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/storetest"
	"github.com/bothyhq/bothy/workspace"
)

// backend opens a metadata store and a blob store for one test.
type backend struct {
	name string
	open func(t *testing.T) (bothy.Store, bothy.BlobStore)
}

var backends = []backend{
	{"sqlite+localblob", func(t *testing.T) (bothy.Store, bothy.BlobStore) {
		blobs, err := localblob.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return storetest.OpenSQLite(t), blobs
	}},
	{"postgres+gcs", func(t *testing.T) (bothy.Store, bothy.BlobStore) {
		return storetest.OpenPostgres(t), gcstest.New(t)
	}},
}

// env is one computer of one tenant on one backend.
type env struct {
	t        *testing.T
	ctx      context.Context
	store    bothy.Store
	blobs    bothy.BlobStore
	fs       *workspace.FS
	tenant   string
	computer string
}

// run runs fn on a fresh computer on every backend.
func run(t *testing.T, fn func(t *testing.T, e *env)) {
	runOpts(t, workspace.Options{}, fn)
}

func runOpts(t *testing.T, opts workspace.Options, fn func(t *testing.T, e *env)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			store, blobs := b.open(t)
			e := &env{t: t, ctx: context.Background(), store: store, blobs: blobs, fs: workspace.New(store, blobs, opts)}
			e.tenant = e.newTenant()
			e.computer = e.newComputer(e.tenant)
			fn(t, e)
		})
	}
}

var ids atomic.Int64

func (e *env) newTenant() string {
	e.t.Helper()
	key := make([]byte, 32)
	rand.Read(key)
	id := fmt.Sprintf("tenant-%d", ids.Add(1))
	if err := e.store.CreateTenant(e.ctx, &bothy.Tenant{ID: id, Name: id, HashKey: key}); err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *env) newComputer(tenant string) string {
	e.t.Helper()
	id := fmt.Sprintf("computer-%d", ids.Add(1))
	if err := e.store.CreateComputer(e.ctx, &bothy.Computer{ID: id, TenantID: tenant, Owner: "test", Profile: "standard", State: bothy.StateCold}); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// rev returns the computer's current revision number.
func (e *env) rev() int64 {
	e.t.Helper()
	c, err := e.store.FindComputer(e.ctx, e.tenant, e.computer)
	if err != nil {
		e.t.Fatal(err)
	}
	return c.Revision
}

// write writes a file, creating parents, and checks that it commits one revision.
func (e *env) write(p, data string) *bothy.Revision {
	e.t.Helper()
	before := e.rev()
	rev, err := e.fs.WriteFile(e.ctx, e.tenant, e.computer, p, strings.NewReader(data), bothy.WriteOptions{MkdirParents: true})
	if err != nil {
		e.t.Fatalf("write %q: %v", p, err)
	} else if rev.Number != before+1 || e.rev() != before+1 {
		e.t.Fatalf("write %q: revision %d, want %d", p, rev.Number, before+1)
	}
	return rev
}

func (e *env) mkdir(p string) {
	e.t.Helper()
	if _, err := e.fs.Mkdir(e.ctx, e.tenant, e.computer, p, bothy.MkdirOptions{Parents: true}); err != nil {
		e.t.Fatalf("mkdir %q: %v", p, err)
	}
}

func (e *env) symlink(target, p string) {
	e.t.Helper()
	if _, err := e.fs.Symlink(e.ctx, e.tenant, e.computer, target, p); err != nil {
		e.t.Fatalf("symlink %q -> %q: %v", p, target, err)
	}
}

// read reads a whole file.
func (e *env) read(p string) string {
	e.t.Helper()
	b, err := e.readErr(p, 0, -1)
	if err != nil {
		e.t.Fatalf("read %q: %v", p, err)
	}
	return string(b)
}

func (e *env) readErr(p string, off, length int64) ([]byte, error) {
	rc, _, err := e.fs.ReadFile(e.ctx, e.tenant, e.computer, p, off, length)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	_, err = io.Copy(&buf, rc)
	return buf.Bytes(), err
}

// exists reports whether p exists (without following a final symlink).
func (e *env) exists(p string) bool {
	e.t.Helper()
	_, err := e.fs.Lstat(e.ctx, e.tenant, e.computer, p)
	if err != nil && bothy.ErrorCode(err) != bothy.ENOTFOUND {
		e.t.Fatalf("lstat %q: %v", p, err)
	}
	return err == nil
}

// chunks returns the number of chunks of the file at root level name.
func (e *env) chunks(name string) int {
	e.t.Helper()
	c, err := e.store.FindComputer(e.ctx, e.tenant, e.computer)
	if err != nil {
		e.t.Fatal(err)
	}
	rev, err := e.store.FindRevision(e.ctx, e.tenant, e.computer, c.Revision)
	if err != nil {
		e.t.Fatal(err)
	}
	tenant, err := e.store.FindTenant(e.ctx, e.tenant)
	if err != nil {
		e.t.Fatal(err)
	}
	repo, err := checkpoint.NewRepo(e.blobs, e.tenant, tenant.HashKey)
	if err != nil {
		e.t.Fatal(err)
	}
	snap, err := repo.Open(e.ctx, rev.RootDigest, rev.Packs)
	if err != nil {
		e.t.Fatal(err)
	}
	tree, err := snap.Tree(e.ctx, snap.Root())
	if err != nil {
		e.t.Fatal(err)
	}
	entry, ok := tree.Find(name)
	if !ok {
		e.t.Fatalf("%q not in the root tree", name)
	}
	return len(entry.Chunks)
}

// wantCode fails unless err has code.

// unchanged runs fn, which must fail with code and commit nothing.
func (e *env) unchanged(code string, fn func() error) {
	e.t.Helper()
	before := e.rev()
	storetest.WantCode(e.t, fn(), code)
	if after := e.rev(); after != before {
		e.t.Fatalf("revision went from %d to %d on a failed operation", before, after)
	}
}

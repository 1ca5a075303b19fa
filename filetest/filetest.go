// Package filetest is the conformance suite for bothy.FileService. Every
// implementation calls TestFileService from its own tests with a function
// that builds the service over a fresh store:
//
//	func TestFileService(t *testing.T) {
//		filetest.TestFileService(t, func(t *testing.T) *filetest.Env {
//			store, blobs := ... // empty stores that live until t ends
//			fs := workspace.New(store, blobs, workspace.Options{MaxFileSize: 1 << 20, MaxBatch: 10})
//			return &filetest.Env{Files: fs, TenantID: "t1", Other: fs, OtherTenantID: "t2", ...}
//		})
//	}
//
// Every rule of the FileService comment is a subtest, run on a cold
// computer; an implementation that serves active computers too (Env.Activate)
// runs the same rules again on an active one.
package filetest

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/storetest"
)

// Env is a file service under test and the means to give it computers.
type Env struct {
	// Files is the service under test, acting for TenantID.
	Files    bothy.FileService
	TenantID string
	// Other acts for another tenant, OtherTenantID, that owns none of
	// TenantID's computers. A service scoped by its tenantID argument
	// (package workspace) passes itself; one scoped by its credential (the
	// HTTP client) passes a client of the other tenant.
	Other         bothy.FileService
	OtherTenantID string
	// NewComputer returns the id of a new cold computer of TenantID with an
	// empty workspace (revision 0).
	NewComputer func(t *testing.T) string
	// Activate, if set, starts the computer's lease and a runtime that
	// answers the control plane (checkpoints, applies of file changes):
	// the suite then runs every rule again on active computers.
	Activate func(t *testing.T, computerID string)
	// MaxFileSize and MaxBatch are the limits the service was built with
	// (both required): the suite writes a file one byte over MaxFileSize
	// and a batch of MaxBatch+1 operations.
	MaxFileSize int64
	MaxBatch    int
}

// TestFileService runs the conformance suite. open is called once for the
// cold rules and once for the active ones, and must return an Env over
// stores that live until its test ends; each subtest takes a new computer.
func TestFileService(t *testing.T, open func(t *testing.T) *Env) {
	e := open(t)
	if e.MaxFileSize <= 0 || e.MaxBatch <= 0 {
		t.Fatal("filetest.Env needs MaxFileSize and MaxBatch")
	}
	t.Run("Cold", func(t *testing.T) { testAll(t, newOpener(e, false)) })
	// An implementation that serves cold computers only has no active
	// rules to run.
	if e.Activate != nil {
		t.Run("Active", func(t *testing.T) { testAll(t, newOpener(e, true)) })
	}
}

// fixture is one computer of an Env, and the context of its subtest.
type fixture struct {
	*Env
	t   *testing.T
	ctx context.Context
	id  string
}

// opener returns a new computer for a subtest.
type opener func(t *testing.T) *fixture

func newOpener(e *Env, active bool) opener {
	return func(t *testing.T) *fixture {
		t.Helper()
		f := &fixture{Env: e, t: t, ctx: t.Context(), id: e.NewComputer(t)}
		if active {
			e.Activate(t, f.id)
		}
		return f
	}
}

func testAll(t *testing.T, open opener) {
	t.Run("ReadFile", func(t *testing.T) { testReadFile(t, open) })
	t.Run("WriteFile", func(t *testing.T) { testWriteFile(t, open) })
	t.Run("Stat", func(t *testing.T) { testStat(t, open) })
	t.Run("ReadDir", func(t *testing.T) { testReadDir(t, open) })
	t.Run("Glob", func(t *testing.T) { testGlob(t, open) })
	t.Run("Grep", func(t *testing.T) { testGrep(t, open) })
	t.Run("Mkdir", func(t *testing.T) { testMkdir(t, open) })
	t.Run("Remove", func(t *testing.T) { testRemove(t, open) })
	t.Run("Rename", func(t *testing.T) { testRename(t, open) })
	t.Run("Symlink", func(t *testing.T) { testSymlink(t, open) })
	t.Run("Chmod", func(t *testing.T) { testChmod(t, open) })
	t.Run("Apply", func(t *testing.T) { testApply(t, open) })
	t.Run("Paths", func(t *testing.T) { testPaths(t, open) })
	t.Run("NotFound", func(t *testing.T) { testNotFound(t, open) })
	t.Run("Revisions", func(t *testing.T) { testRevisions(t, open) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, open) })
}

// write writes data at p, creating parents, and returns the revision.
func (f *fixture) write(p, data string) *bothy.Revision {
	f.t.Helper()
	rev, err := f.Files.WriteFile(f.ctx, f.TenantID, f.id, p, strings.NewReader(data), bothy.WriteOptions{MkdirParents: true})
	if err != nil {
		f.t.Fatalf("WriteFile(%s): %v", p, err)
	}
	return rev
}

// read returns the whole content of the file at p.
func (f *fixture) read(p string) string {
	f.t.Helper()
	got, _ := f.readRange(p, 0, -1)
	return got
}

// readRange reads length bytes at off of the file at p.
func (f *fixture) readRange(p string, off, length int64) (string, *bothy.FileInfo) {
	f.t.Helper()
	rc, fi, err := f.Files.ReadFile(f.ctx, f.TenantID, f.id, p, off, length)
	if err != nil {
		f.t.Fatalf("ReadFile(%s, %d, %d): %v", p, off, length, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		f.t.Fatalf("read %s: %v", p, err)
	}
	return string(b), fi
}

// stat returns Stat of p.
func (f *fixture) stat(p string) *bothy.FileInfo {
	f.t.Helper()
	fi, err := f.Files.Stat(f.ctx, f.TenantID, f.id, p)
	if err != nil {
		f.t.Fatalf("Stat(%s): %v", p, err)
	}
	return fi
}

// lstat returns Lstat of p.
func (f *fixture) lstat(p string) *bothy.FileInfo {
	f.t.Helper()
	fi, err := f.Files.Lstat(f.ctx, f.TenantID, f.id, p)
	if err != nil {
		f.t.Fatalf("Lstat(%s): %v", p, err)
	}
	return fi
}

// symlink makes a symlink at p holding target.
func (f *fixture) symlink(target, p string) *bothy.Revision {
	f.t.Helper()
	rev, err := f.Files.Symlink(f.ctx, f.TenantID, f.id, target, p)
	if err != nil {
		f.t.Fatalf("Symlink(%s, %s): %v", target, p, err)
	}
	return rev
}

// mkdir makes the directory p and its parents.
func (f *fixture) mkdir(p string) *bothy.Revision {
	f.t.Helper()
	rev, err := f.Files.Mkdir(f.ctx, f.TenantID, f.id, p, bothy.MkdirOptions{Parents: true})
	if err != nil {
		f.t.Fatalf("Mkdir(%s): %v", p, err)
	}
	return rev
}

// missing fails the test unless nothing is at p.
func (f *fixture) missing(p string) {
	f.t.Helper()
	_, err := f.Files.Lstat(f.ctx, f.TenantID, f.id, p)
	storetest.WantCode(f.t, err, bothy.ENOTFOUND)
}

// current returns the current revision number, learned from a mutation
// that changes nothing (mkdir -p of the root).
func (f *fixture) current() int64 {
	f.t.Helper()
	rev, err := f.Files.Mkdir(f.ctx, f.TenantID, f.id, "", bothy.MkdirOptions{Parents: true})
	if err != nil {
		f.t.Fatalf("Mkdir(root, Parents): %v", err)
	}
	return rev.Number
}

// wantRevision fails the test unless rev is revision n of the fixture's
// computer.
func (f *fixture) wantRevision(rev *bothy.Revision, n int64) {
	f.t.Helper()
	if rev == nil || rev.Number != n || rev.ComputerID != f.id {
		f.t.Fatalf("revision %+v, want number %d of %s", rev, n, f.id)
	}
}

// names returns the paths of infos.
func names(infos []*bothy.FileInfo) []string {
	out := []string{}
	for _, fi := range infos {
		out = append(out, fi.Path)
	}
	return out
}

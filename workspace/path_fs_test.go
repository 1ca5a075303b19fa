package workspace_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/storetest"
	"github.com/bothyhq/bothy/workspace"
)

// TestFS_Traversal tries to leave the workspace every way we know; each
// attempt must be EINVALIDPATH and commit nothing.
func TestFS_Traversal(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		e.write("inside/file", "secret of this workspace")
		e.symlink("/etc", "etc")                // absolute: outside
		e.symlink("../../", "up")               // climbs above the root
		e.symlink("inside/../../x", "up2")      // climbs above the root, later
		e.symlink("loop2", "loop1")             // a loop
		e.symlink("loop1", "loop2")             //
		e.symlink("self/x", "self")             // a loop through itself
		e.symlink("../up", "inside/chain")      // a chain to an escaping link
		e.symlink("/etc/passwd", "inside/pass") // absolute file
		long := strings.Repeat("x", 256)

		paths := []string{
			"../x", "/../x", "a/../../x", "./../x", "inside/../../etc/passwd",
			"a\x00b", "inside/file\x00.txt", long, "inside/" + long,
			strings.Repeat("a/", 2049),
			"etc/passwd", "etc", "up/etc/passwd", "up", "up2", "inside/chain/x", "inside/pass",
			"loop1", "loop1/x", "self", "self/y",
		}
		for _, p := range paths {
			t.Run(fmt.Sprintf("%.30q", p), func(t *testing.T) {
				e.unchanged(bothy.EINVALIDPATH, func() error {
					_, err := e.fs.WriteFile(e.ctx, e.tenant, e.computer, p, strings.NewReader("pwned"), bothy.WriteOptions{MkdirParents: true})
					return err
				})
				if p == "etc" || p == "up" || p == "up2" || p == "loop1" || p == "self" || p == "inside/pass" {
					// The link itself can be described and removed; only following it is refused.
					if _, err := e.fs.Lstat(e.ctx, e.tenant, e.computer, p); err != nil {
						t.Fatalf("lstat of the link itself: %v", err)
					}
				}
				e.unchanged(bothy.EINVALIDPATH, func() error { _, err := e.readErr(p, 0, -1); return err })
				e.unchanged(bothy.EINVALIDPATH, func() error { _, err := e.fs.Stat(e.ctx, e.tenant, e.computer, p); return err })
				e.unchanged(bothy.EINVALIDPATH, func() error {
					_, err := e.fs.ReadDir(e.ctx, e.tenant, e.computer, p, bothy.ReadDirOptions{})
					return err
				})
				e.unchanged(bothy.EINVALIDPATH, func() error {
					_, err := e.fs.Mkdir(e.ctx, e.tenant, e.computer, p+"/sub", bothy.MkdirOptions{Parents: true})
					return err
				})
				e.unchanged(bothy.EINVALIDPATH, func() error { _, err := e.fs.Chmod(e.ctx, e.tenant, e.computer, p, 0o777); return err })
				e.unchanged(bothy.EINVALIDPATH, func() error {
					_, err := e.fs.Rename(e.ctx, e.tenant, e.computer, "inside/file", p+"/moved")
					return err
				})
				e.unchanged(bothy.EINVALIDPATH, func() error {
					_, err := e.fs.Grep(e.ctx, e.tenant, e.computer, bothy.GrepOptions{Pattern: "root", Path: p})
					return err
				})
				e.unchanged(bothy.EINVALIDPATH, func() error {
					_, err := e.fs.Apply(e.ctx, e.tenant, e.computer, []bothy.FileOp{{Op: "write", Path: p + "/f", Data: []byte("x"), Parents: true}})
					return err
				})
			})
		}
		t.Run("EscapeMessage", func(t *testing.T) {
			_, err := e.fs.Stat(e.ctx, e.tenant, e.computer, "etc/passwd")
			if !strings.Contains(bothy.ErrorMessage(err), "outside the workspace") {
				t.Fatalf("message %q", bothy.ErrorMessage(err))
			}
		})
		t.Run("RemoveLink", func(t *testing.T) {
			if _, err := e.fs.Remove(e.ctx, e.tenant, e.computer, "etc", bothy.RemoveOptions{}); err != nil {
				t.Fatal(err)
			}
		})
		t.Run("Glob", func(t *testing.T) {
			e.unchanged(bothy.EINVALIDPATH, func() error { _, err := e.fs.Glob(e.ctx, e.tenant, e.computer, "../*", 0); return err })
			// Glob never descends through links: "**" finds the links and nothing behind them.
			list, err := e.fs.Glob(e.ctx, e.tenant, e.computer, "**", 0)
			if err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, fi := range list {
				paths = append(paths, fi.Path)
			}
			if got, want := strings.Join(paths, " "), "inside inside/chain inside/file inside/pass loop1 loop2 self up up2"; got != want {
				t.Fatalf("glob ** = %s, want %s", got, want)
			}
			if list, err := e.fs.Glob(e.ctx, e.tenant, e.computer, "up/**", 0); err != nil || len(list) != 0 {
				t.Fatalf("glob up/** = %v, %v", list, err)
			}
		})
		t.Run("InsideLinksWork", func(t *testing.T) {
			e.symlink("../inside/file", "inside/rel")
			if e.read("inside/rel") != "secret of this workspace" {
				t.Fatal("a relative link inside the workspace must work")
			}
		})
	})
}

func TestFS_MountPoint(t *testing.T) {
	runOpts(t, workspace.Options{MountPoint: "/workspace/"}, func(t *testing.T, e *env) {
		e.write("a/file", "A")
		e.symlink("/workspace/a/file", "abs")
		e.symlink("/workspace", "top")
		e.symlink("/workspacex/a", "near")
		if e.read("abs") != "A" || e.read("top/a/file") != "A" {
			t.Fatal("absolute links under the mount point resolve inside")
		}
		_, err := e.readErr("near/file", 0, -1)
		storetest.WantCode(t, err, bothy.EINVALIDPATH)
		e.symlink("/workspace/../etc", "esc")
		_, err = e.readErr("esc/passwd", 0, -1)
		storetest.WantCode(t, err, bothy.EINVALIDPATH)
	})
}

// TestFS_Concurrent runs writers against one computer at once: each lands,
// in its own revision, by retrying after a lost compare-and-swap.
func TestFS_Concurrent(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		const writers = 4
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for i := range writers {
			wg.Go(func() {
				_, err := e.fs.WriteFile(e.ctx, e.tenant, e.computer, fmt.Sprintf("w%d", i), strings.NewReader(strings.Repeat("x", 1000*i)), bothy.WriteOptions{})
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := e.rev(); got != writers {
			t.Fatalf("revision %d, want %d", got, writers)
		}
		for i := range writers {
			if got := e.read(fmt.Sprintf("w%d", i)); len(got) != 1000*i {
				t.Fatalf("w%d has %d bytes", i, len(got))
			}
		}
		rev, err := e.store.FindRevision(e.ctx, e.tenant, e.computer, writers)
		if err != nil || rev.FileCount != writers || rev.Size != 6000 {
			t.Fatalf("final revision %+v, %v", rev, err)
		}
	})
}

// TestFS_ConcurrentExclusive checks that a retried write checks Exclusive again.
func TestFS_ConcurrentExclusive(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		const writers = 4
		var wg sync.WaitGroup
		codes := make(chan string, writers)
		for i := range writers {
			wg.Go(func() {
				_, err := e.fs.WriteFile(e.ctx, e.tenant, e.computer, "lock", strings.NewReader(fmt.Sprint(i)), bothy.WriteOptions{Exclusive: true})
				codes <- bothy.ErrorCode(err)
			})
		}
		wg.Wait()
		close(codes)
		won := 0
		for code := range codes {
			switch code {
			case "":
				won++
			case bothy.ECONFLICT:
			default:
				t.Fatalf("code %q", code)
			}
		}
		if won != 1 || e.rev() != 1 {
			t.Fatalf("%d exclusive writers won, revision %d", won, e.rev())
		}
	})
}

func TestFS_TenantIsolation(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		e.write("secret", "s")
		other := e.newTenant()
		otherComputer := e.newComputer(other)
		_, _, err := e.fs.ReadFile(e.ctx, other, e.computer, "secret", 0, -1)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.fs.Stat(e.ctx, other, e.computer, "secret")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.fs.Glob(e.ctx, other, e.computer, "**", 0)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		e.unchanged(bothy.ENOTFOUND, func() error {
			_, err := e.fs.WriteFile(e.ctx, other, e.computer, "x", strings.NewReader("x"), bothy.WriteOptions{})
			return err
		})
		e.unchanged(bothy.ENOTFOUND, func() error {
			_, err := e.fs.Remove(e.ctx, other, e.computer, "secret", bothy.RemoveOptions{})
			return err
		})
		// The right tenant with the wrong computer is not found either.
		_, err = e.fs.Stat(e.ctx, e.tenant, otherComputer, "secret")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.fs.Stat(e.ctx, e.tenant, "no-such-computer", "secret")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
}

func TestFS_NotCold(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		e.write("f", "x")
		if err := e.store.SetComputerState(e.ctx, e.tenant, e.computer, bothy.StateActive); err != nil {
			t.Fatal(err)
		}
		e.unchanged(bothy.ECONFLICT, func() error {
			_, err := e.fs.WriteFile(e.ctx, e.tenant, e.computer, "g", strings.NewReader("x"), bothy.WriteOptions{})
			return err
		})
		if e.read("f") != "x" {
			t.Fatal("reads work in any state")
		}
		if err := e.store.SetComputerState(e.ctx, e.tenant, e.computer, bothy.StateDestroyed); err != nil {
			t.Fatal(err)
		}
		_, err := e.fs.Stat(e.ctx, e.tenant, e.computer, "f")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
	})
}

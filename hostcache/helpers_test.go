package hostcache_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/hostcache"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/testenv"
)

const tenant = "t1"

// TestMain runs the tests with a temporary directory of their own (every
// t.TempDir is under it) and fails if an overlay is left mounted there.
// Only that directory is looked at: other packages' tests, which may run
// at the same time, mount overlays elsewhere.
func TestMain(m *testing.M) {
	root, err := os.MkdirTemp("", "hostcache-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Tests run commands as other uids in trees under it (t.TempDir's
	// own directories are 0700 as before; only the root is opened).
	os.Chmod(root, 0o755)
	os.Setenv("TMPDIR", root)
	code := m.Run()
	if left, _ := hostcache.OverlayMounts(root); len(left) > 0 && code == 0 {
		fmt.Fprintf(os.Stderr, "tests left %d overlay mounts behind: %v\n", len(left), left)
		code = 1
	}
	if code == 0 {
		os.RemoveAll(root)
	}
	os.Exit(code)
}

// needRoot skips a test that mounts overlayfs when not root.
func needRoot(tb testing.TB) {
	tb.Helper()
	testenv.Root(tb, "overlay mounts need root")
}

// newRepo returns a repo in a fresh local blob store, with a random key.
func newRepo(tb testing.TB) *checkpoint.Repo {
	tb.Helper()
	blobs, err := localblob.Open(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	repo, err := checkpoint.NewRepo(blobs, tenant, key)
	if err != nil {
		tb.Fatal(err)
	}
	return repo
}

// snapshotOf checkpoints dir on top of nothing and opens the result.
func snapshotOf(tb testing.TB, repo *checkpoint.Repo, dir string) (*checkpoint.Snapshot, *checkpoint.Result) {
	tb.Helper()
	ctx := context.Background()
	res, err := repo.Checkpoint(ctx, dir, nil, checkpoint.CheckpointOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return open(tb, repo, res.Root, res.Packs), res
}

func open(tb testing.TB, repo *checkpoint.Repo, root checkpoint.Hash, packs []string) *checkpoint.Snapshot {
	tb.Helper()
	snap, err := repo.Open(context.Background(), root.String(), packs)
	if err != nil {
		tb.Fatal(err)
	}
	return snap
}

// mount mounts lower under a new lease directory and unmounts in Cleanup,
// even when the test fails.
func mount(tb testing.TB, lower string, opts hostcache.MountOptions) *hostcache.Overlay {
	tb.Helper()
	m, err := hostcache.Mount(context.Background(), lower, tb.TempDir(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := m.Unmount(context.Background()); err != nil {
			tb.Errorf("unmount: %v", err)
		}
	})
	return m
}

// writeTree creates a workspace of files, directories, symlinks and modes.
func writeTree(tb testing.TB, dir string, rng *mrand.Rand, files int) {
	tb.Helper()
	dirs := []string{dir}
	for i := 0; i < files; i++ {
		d := dirs[rng.IntN(len(dirs))]
		switch rng.IntN(6) {
		case 0:
			nd := filepath.Join(d, fmt.Sprintf("d%03d", i))
			must(tb, os.Mkdir(nd, 0o755))
			dirs = append(dirs, nd)
		case 1:
			must(tb, os.Symlink(fmt.Sprintf("target-%d", i), filepath.Join(d, fmt.Sprintf("l%03d", i))))
		default:
			mode := []fs.FileMode{0o644, 0o755, 0o600, 0o444}[rng.IntN(4)]
			must(tb, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d", i)), randBytes(rng, rng.IntN(4096)), mode))
			must(tb, os.Chmod(filepath.Join(d, fmt.Sprintf("f%03d", i)), mode))
		}
	}
	// One directory with a non-default mode and one larger file.
	must(tb, os.Mkdir(filepath.Join(dir, "private"), 0o700))
	must(tb, os.WriteFile(filepath.Join(dir, "private", "big"), randBytes(rng, 1<<20+12345), 0o644))
}

func randBytes(rng *mrand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// hashTree digests every path, type, mode, mtime, symlink target and file
// content under dir.
func hashTree(tb testing.TB, dir string) string {
	tb.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if p == dir {
			return nil // the root's mode and directory mtimes are not kept
		} else if d.IsDir() {
			fmt.Fprintf(h, "%s %v\n", strings.TrimPrefix(p, dir), fi.Mode())
			return nil
		}
		fmt.Fprintf(h, "%s %v %d\n", strings.TrimPrefix(p, dir), fi.Mode(), fi.ModTime().UnixNano())
		switch {
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(h, f)
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			fmt.Fprintln(h, t)
			return err
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// randomOps applies n random file system operations under dir (an overlay
// merged directory), the way an agent's commands would.
func randomOps(tb testing.TB, dir string, rng *mrand.Rand, n int) {
	tb.Helper()
	for i := 0; i < n; i++ {
		var files, dirs []string
		dirs = append(dirs, dir)
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == dir {
				return nil
			}
			if d.IsDir() {
				dirs = append(dirs, p)
			} else if d.Type().IsRegular() {
				files = append(files, p)
			}
			return nil
		})
		pick := func(s []string) string { return s[rng.IntN(len(s))] }
		nd := pick(dirs)
		fresh := filepath.Join(nd, fmt.Sprintf("n%d-%d", i, rng.IntN(1000)))
		op := rng.IntN(16)
		if (op == 10 || op == 11) && rng.IntN(3) != 0 {
			op = 0 // whole-tree deletions would soon leave nothing to change
		}
		if len(files) == 0 && op < 10 {
			op = 0
		}
		if len(dirs) == 1 && op >= 10 && op != 14 {
			op = 14
		}
		var err error
		switch op {
		case 0: // create
			err = os.WriteFile(fresh, randBytes(rng, rng.IntN(8192)), 0o644)
		case 1: // modify in place
			err = os.WriteFile(pick(files), randBytes(rng, rng.IntN(8192)), 0o644)
		case 2: // append
			var f *os.File
			if f, err = os.OpenFile(pick(files), os.O_WRONLY|os.O_APPEND, 0); err == nil {
				_, err = f.Write(randBytes(rng, 100))
				f.Close()
			}
		case 3: // delete file
			err = os.Remove(pick(files))
		case 4: // rename file
			err = os.Rename(pick(files), fresh)
		case 5: // chmod file (copies a lower file up)
			err = os.Chmod(pick(files), []fs.FileMode{0o644, 0o755, 0o600, 0o444}[rng.IntN(4)])
		case 6: // touch only
			err = os.Chtimes(pick(files), randTime(rng), randTime(rng))
		case 7: // replace file with dir
			f := pick(files)
			if err = os.Remove(f); err == nil {
				if err = os.Mkdir(f, 0o755); err == nil {
					err = os.WriteFile(filepath.Join(f, "inside"), []byte("x"), 0o644)
				}
			}
		case 8: // symlink
			err = os.Symlink("../"+filepath.Base(pick(files)), fresh)
		case 9: // a fifo, which no checkpoint keeps
			if rng.IntN(4) == 0 {
				err = mkfifo(fresh)
			}
		case 10: // delete dir tree
			err = os.RemoveAll(pick(dirs[1:]))
		case 11: // replace dir with file
			d := pick(dirs[1:])
			if err = os.RemoveAll(d); err == nil {
				err = os.WriteFile(d, []byte("was a dir"), 0o600)
			}
		case 12: // delete and recreate a dir (opaque), with a new file in it
			d := pick(dirs[1:])
			if err = os.RemoveAll(d); err == nil {
				if err = os.Mkdir(d, 0o750); err == nil {
					err = os.WriteFile(filepath.Join(d, "again"), []byte("again"), 0o644)
				}
			}
		case 13: // rename dir: EXDEV for a lower dir without redirect_dir, then copy like mv(1)
			d := pick(dirs[1:])
			if strings.HasPrefix(fresh, d+"/") {
				fresh = filepath.Join(dir, filepath.Base(fresh))
			}
			if err = os.Rename(d, fresh); err != nil && strings.Contains(err.Error(), "cross-device") {
				if err = copyTree(d, fresh); err == nil {
					err = os.RemoveAll(d)
				}
			}
		case 14: // mkdir
			err = os.Mkdir(fresh, 0o755)
		case 15: // chmod dir
			err = os.Chmod(pick(dirs[1:]), []fs.FileMode{0o755, 0o700, 0o711}[rng.IntN(3)])
		}
		if err != nil {
			tb.Fatalf("op %d (%d): %v", i, op, err)
		}
	}
}

func randTime(rng *mrand.Rand) time.Time {
	return time.Unix(1_600_000_000+rng.Int64N(100_000_000), rng.Int64N(1e9))
}

// sortedNames lists dir's names, for messages.
func sortedNames(dir string) []string {
	es, _ := os.ReadDir(dir)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

func mkfifo(p string) error { return unix.Mkfifo(p, 0o644) }

// copyTree copies src to dst like cp -a: modes, mtimes and symlinks kept.
func copyTree(src, dst string) error {
	type dirMode struct {
		path string
		fi   fs.FileInfo
	}
	var dirs []dirMode
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		to := filepath.Join(dst, strings.TrimPrefix(p, src))
		switch {
		case d.IsDir():
			dirs = append(dirs, dirMode{to, fi})
			return os.Mkdir(to, 0o700)
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(t, to); err != nil {
				return err
			}
			ts := []unix.Timespec{unix.NsecToTimespec(fi.ModTime().UnixNano()), unix.NsecToTimespec(fi.ModTime().UnixNano())}
			return unix.UtimesNanoAt(unix.AT_FDCWD, to, ts, unix.AT_SYMLINK_NOFOLLOW)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.WriteFile(to, b, fi.Mode().Perm()); err != nil {
				return err
			}
			if err := os.Chmod(to, fi.Mode().Perm()); err != nil {
				return err
			}
			return os.Chtimes(to, fi.ModTime(), fi.ModTime())
		}
		return nil // fifos are not copied
	})
	for i := len(dirs) - 1; err == nil && i >= 0; i-- {
		err = os.Chmod(dirs[i].path, dirs[i].fi.Mode().Perm())
	}
	return err
}

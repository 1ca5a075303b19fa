package uidpool_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/testenv"
	"github.com/bothyhq/bothy/uidpool"
)

// newPool returns a pool of count uids from 500000 in a new directory,
// whose reservations are live as long as live says.
func newPool(t *testing.T, count int, live func(uid int, leaseID string) bool) *uidpool.Pool {
	t.Helper()
	return &uidpool.Pool{Dir: t.TempDir(), Base: 500000, Count: count, TTL: time.Hour, Live: live}
}

// age sets the time uid's reservation was last made to d ago.
func age(t *testing.T, p *uidpool.Pool, uid int, d time.Duration) {
	t.Helper()
	then := time.Now().Add(-d)
	if err := os.Chtimes(filepath.Join(p.Dir, strconv.Itoa(uid)), then, then); err != nil {
		t.Fatal(err)
	}
}

func reserve(t *testing.T, p *uidpool.Pool, leaseID string, want int) {
	t.Helper()
	if uid, err := p.Reserve(leaseID); err != nil || uid != want {
		t.Fatalf("Reserve(%q) = %d, %v; want %d", leaseID, uid, err, want)
	}
}

func TestPool_Reserve(t *testing.T) {
	never := func(int, string) bool { return false }
	always := func(int, string) bool { return true }
	t.Run("OK", func(t *testing.T) {
		p := newPool(t, 3, always)
		reserve(t, p, "a", 500000)
		reserve(t, p, "b", 500001)
		reserve(t, p, "a", 500000)
		if !p.Holds(500000, "a") || p.Holds(500000, "b") || p.Holds(500002, "a") {
			t.Fatal("Holds does not match the reservations")
		}
		p.Release(500000)
		p.Release(500000)
		if p.Holds(500000, "a") {
			t.Fatal("released uid still held")
		}
		reserve(t, p, "c", 500000)
	})
	t.Run("ErrConflict", func(t *testing.T) {
		p := newPool(t, 1, always)
		reserve(t, p, "a", 500000)
		if _, err := p.Reserve("b"); bothy.ErrorCode(err) != bothy.ECONFLICT {
			t.Fatalf("Reserve of a full pool: %v, want %s", err, bothy.ECONFLICT)
		}
	})
	t.Run("Abandoned", func(t *testing.T) {
		p := newPool(t, 2, never)
		reserve(t, p, "a", 500000)
		age(t, p, 500000, 2*time.Hour)
		reserve(t, p, "b", 500000)
	})
	t.Run("Recent", func(t *testing.T) {
		p := newPool(t, 2, never)
		reserve(t, p, "a", 500000)
		age(t, p, 500000, 2*time.Hour)
		// Reserving again renews the reservation.
		reserve(t, p, "a", 500000)
		reserve(t, p, "b", 500001)
	})
	t.Run("Live", func(t *testing.T) {
		var asked []string
		p := newPool(t, 2, func(uid int, leaseID string) bool {
			asked = append(asked, leaseID)
			return true
		})
		reserve(t, p, "a", 500000)
		age(t, p, 500000, 2*time.Hour)
		reserve(t, p, "b", 500001)
		if len(asked) != 1 || asked[0] != "a" {
			t.Fatalf("Live asked about %q, want [a]", asked)
		}
	})
}

func TestChown(t *testing.T) {
	testenv.Root(t, "chown needs root")
	const uid = 500000
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	for _, err := range []error{
		os.MkdirAll(filepath.Join(root, "d"), 0o755),
		os.WriteFile(filepath.Join(root, "d", "f"), nil, 0o644),
		os.WriteFile(outside, nil, 0o644),
		os.Symlink(outside, filepath.Join(root, "link")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	owner := func(path string) (int, int) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			t.Fatal(err)
		}
		return int(st.Uid), int(st.Gid)
	}
	t.Run("OK", func(t *testing.T) {
		if err := uidpool.Chown(root, uid); err != nil {
			t.Fatal(err)
		}
		for _, rel := range []string{".", "d", "d/f", "link"} {
			if u, g := owner(filepath.Join(root, rel)); u != uid || g != uid {
				t.Errorf("%s is %d:%d, want %d:%d", rel, u, g, uid, uid)
			}
		}
		if u, _ := owner(outside); u == uid {
			t.Error("Chown followed a symlink out of the tree")
		}
	})
	t.Run("Owned", func(t *testing.T) {
		// An owned root means the tree needs no chown.
		f := filepath.Join(root, "d", "f")
		if err := os.Lchown(f, 0, 0); err != nil {
			t.Fatal(err)
		}
		if err := uidpool.Chown(root, uid); err != nil {
			t.Fatal(err)
		}
		if u, _ := owner(f); u != 0 {
			t.Errorf("Chown of an owned root changed %s to uid %d", f, u)
		}
	})
	t.Run("ErrNotExist", func(t *testing.T) {
		if err := uidpool.Chown(filepath.Join(root, "missing"), uid); err == nil {
			t.Fatal("Chown of a missing tree succeeded")
		}
	})
}

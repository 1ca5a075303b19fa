package secretfile_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/secretfile"
	"github.com/bothyhq/bothy/secrettest"
	"github.com/bothyhq/bothy/testenv"
)

func TestStore(t *testing.T) {
	secrettest.TestSecretService(t, func(t *testing.T) (bothy.SecretService, func(string, string, []byte)) {
		s := secretfile.NewStore(filepath.Join(t.TempDir(), "secrets"))
		return s, func(tenantID, name string, value []byte) {
			t.Helper()
			if err := s.Put(tenantID, name, value); err != nil {
				t.Fatalf("put %s/%s: %v", tenantID, name, err)
			}
		}
	})
}

// write creates DIR/tenant/name by hand, as an operator would.
func write(t *testing.T, dir, tenant, name, data string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, tenant), 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, tenant, name)
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestStore_Secret(t *testing.T) {
	ctx := context.Background()
	t.Run("OneNewlineStripped", func(t *testing.T) {
		dir := t.TempDir()
		s := secretfile.NewStore(dir)
		for data, want := range map[string]string{"echoed\n": "echoed", "printed": "printed", "two\n\n": "two\n", "\n": ""} {
			write(t, dir, "t1", "k", data, 0o600)
			if got, err := s.Secret(ctx, "t1", "k"); err != nil || string(got) != want {
				t.Errorf("file %q: %q, %v; want %q", data, got, err, want)
			}
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		s := secretfile.NewStore(filepath.Join(t.TempDir(), "missing"))
		if _, err := s.Secret(ctx, "t1", "k"); bothy.ErrorCode(err) != bothy.ENOTFOUND {
			t.Fatalf("missing directory: %v", err)
		}
	})
	refused := func(t *testing.T, s *secretfile.Store, tenant, name, problem string) {
		t.Helper()
		v, err := s.Secret(ctx, tenant, name)
		if err == nil || bothy.ErrorCode(err) != bothy.EINTERNAL || !strings.Contains(err.Error(), problem) {
			t.Fatalf("got %q, %v; want an internal error about %q", v, err, problem)
		}
		if bytes.Contains([]byte(err.Error()), []byte("topsecret")) {
			t.Fatalf("the error holds the value: %v", err)
		}
	}
	t.Run("ErrReadableByOthers", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, "t1", "group", "topsecret", 0o640)
		write(t, dir, "t1", "world", "topsecret", 0o604)
		write(t, dir, "t1", "writable", "topsecret", 0o620)
		s := secretfile.NewStore(dir)
		for _, name := range []string{"group", "world", "writable"} {
			refused(t, s, "t1", name, "chmod 600")
		}
	})
	t.Run("ErrSymlink", func(t *testing.T) {
		dir := t.TempDir()
		target := write(t, dir, "other", "real", "topsecret", 0o600)
		if err := os.Symlink(target, filepath.Join(dir, "other", "link")); err != nil {
			t.Fatal(err)
		}
		s := secretfile.NewStore(dir)
		refused(t, s, "other", "link", "symlink")
		// A tenant directory that is a symlink to another tenant's.
		if err := os.Symlink(filepath.Join(dir, "other"), filepath.Join(dir, "t2")); err != nil {
			t.Fatal(err)
		}
		refused(t, s, "t2", "real", "symlink")
	})
	t.Run("ErrNotRegular", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, "t1", "x", "", 0o600)
		if err := syscall.Mkfifo(filepath.Join(dir, "t1", "fifo"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(dir, "t1", "dir"), 0o700); err != nil {
			t.Fatal(err)
		}
		s := secretfile.NewStore(dir)
		done := make(chan struct{})
		go func() {
			defer close(done)
			refused(t, s, "t1", "fifo", "not a regular file")
			refused(t, s, "t1", "dir", "not a regular file")
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("opening a FIFO hung")
		}
	})
	t.Run("ErrOtherOwner", func(t *testing.T) {
		testenv.Root(t, "needs root to chown")
		dir := t.TempDir()
		path := write(t, dir, "t1", "k", "topsecret", 0o600)
		if err := os.Chown(path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		refused(t, secretfile.NewStore(dir), "t1", "k", "owned by uid 65534")
	})
	t.Run("ErrTooLarge", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir, "t1", "k", strings.Repeat("x", bothy.MaxSecretBytes+1)+"\n", 0o600)
		refused(t, secretfile.NewStore(dir), "t1", "k", "over")
	})
}

func TestStore_Put(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "secrets")
		s := secretfile.NewStore(dir)
		if err := s.Put("t1", "k", []byte("value\n")); err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "t1"): 0o700, filepath.Join(dir, "t1", "k"): 0o600} {
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != want {
				t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), want)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "t1", "k")); string(b) != "value\n\n" {
			t.Errorf("file holds %q", b)
		}
		entries, _ := os.ReadDir(filepath.Join(dir, "t1"))
		if len(entries) != 1 {
			t.Errorf("temporary files left: %v", entries)
		}
	})
	t.Run("ReplacesSymlink", func(t *testing.T) {
		dir := t.TempDir()
		target := write(t, dir, "other", "real", "keep", 0o600)
		write(t, dir, "t1", "x", "", 0o600)
		if err := os.Symlink(target, filepath.Join(dir, "t1", "k")); err != nil {
			t.Fatal(err)
		}
		if err := secretfile.NewStore(dir).Put("t1", "k", []byte("new")); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(target); string(b) != "keep" {
			t.Fatalf("put wrote through a symlink: %q", b)
		}
	})
	t.Run("ErrTooLarge", func(t *testing.T) {
		err := secretfile.NewStore(t.TempDir()).Put("t1", "k", make([]byte, bothy.MaxSecretBytes+1))
		if bothy.ErrorCode(err) != bothy.ETOOLARGE {
			t.Fatalf("got %v, want ETOOLARGE", err)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		dir := t.TempDir()
		s := secretfile.NewStore(dir)
		for _, tt := range [][2]string{{"../x", "k"}, {"t1", "../k"}, {"t1", ".tmp-1"}, {"", "k"}} {
			if err := s.Put(tt[0], tt[1], []byte("v")); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("put %q %q: %v, want EINVALID", tt[0], tt[1], err)
			}
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("an invalid put created %v", entries)
		}
	})
}

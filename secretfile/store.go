// Package secretfile is a bothy.SecretService on a local directory, the
// embedded default's: DIR/TENANT_ID/NAME holds one secret, the file's
// bytes with one trailing "\n" removed, so that a file written by
// `echo value > NAME` and one written by `printf value > NAME` both hold
// "value". Put writes the value followed by "\n", so that any value,
// including one that ends in a newline, reads back exactly.
//
// A secret file must be a regular file (not a symlink), owned by the
// process's user or by root, and not readable or writable by group or
// others; the tenant's directory must not be a symlink. Anything else is
// refused with an error naming the problem, which callers see as
// EINTERNAL: it is the operator's to fix. The package uses openat(2) and
// is for Linux, as the rest of bothy.
package secretfile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/bothyhq/bothy"
)

// Store is a directory of secrets, one file per secret.
type Store struct {
	dir string
}

var _ bothy.SecretService = (*Store)(nil)

// NewStore returns the Store of dir. Put creates dir (mode 0700) when it
// does not exist; Secret on a missing dir is ENOTFOUND.
func NewStore(dir string) *Store {
	return &Store{dir: dir}
}

func validate(tenantID, name string) error {
	if err := bothy.ValidateID("tenant id", tenantID); err != nil {
		return err
	}
	return bothy.ValidateSecretName(name)
}

// Secret returns the value of the tenant's secret name.
func (s *Store) Secret(ctx context.Context, tenantID, name string) ([]byte, error) {
	if err := validate(tenantID, name); err != nil {
		return nil, err
	}
	notFound := bothy.Errorf(bothy.ENOTFOUND, "secret %s not found", name)
	tfd, err := s.openTenant(tenantID, false)
	if errors.Is(err, syscall.ENOENT) {
		return nil, notFound
	} else if err != nil {
		return nil, err
	}
	defer syscall.Close(tfd)
	path := filepath.Join(s.dir, tenantID, name)
	// O_NONBLOCK: a FIFO planted under the name must not hang the open.
	fd, err := syscall.Openat(tfd, name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return nil, notFound
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("secret file %s is a symlink", path)
	case err != nil:
		return nil, fmt.Errorf("open secret file %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat secret file: %w", err)
	}
	if err := checkFile(path, fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, bothy.MaxSecretBytes+2))
	if err != nil {
		return nil, fmt.Errorf("read secret file %s: %w", path, err)
	}
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if len(b) > bothy.MaxSecretBytes {
		return nil, fmt.Errorf("secret file %s is over %d bytes", path, bothy.MaxSecretBytes)
	}
	return b, nil
}

// checkFile refuses a secret file that is not a regular file of ours (or
// root's) closed to group and others.
func checkFile(path string, fi os.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("secret file %s is not a regular file (%s)", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("secret file %s has mode %04o: it must not be open to group or others (chmod 600)", path, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() && st.Uid != 0 {
		return fmt.Errorf("secret file %s is owned by uid %d, not by uid %d or root", path, st.Uid, os.Geteuid())
	}
	return nil
}

// openTenant opens the tenant's directory without following a symlink,
// creating it (mode 0700) when create is set, and returns its descriptor.
// A missing directory is syscall.ENOENT.
func (s *Store) openTenant(tenantID string, create bool) (int, error) {
	dfd, err := syscall.Open(s.dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return -1, err
		}
		return -1, fmt.Errorf("open secret directory %s: %w", s.dir, err)
	}
	defer syscall.Close(dfd)
	if create {
		if err := syscall.Mkdirat(dfd, tenantID, 0o700); err == nil {
			if err := syscall.Fsync(dfd); err != nil {
				return -1, fmt.Errorf("sync secret directory: %w", err)
			}
		} else if !errors.Is(err, syscall.EEXIST) {
			return -1, fmt.Errorf("create tenant secret directory: %w", err)
		}
	}
	path := filepath.Join(s.dir, tenantID)
	tfd, err := syscall.Openat(dfd, tenantID, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return -1, err
	case errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENOTDIR):
		return -1, fmt.Errorf("tenant secret directory %s is a symlink or not a directory", path)
	case err != nil:
		return -1, fmt.Errorf("open tenant secret directory %s: %w", path, err)
	}
	return tfd, nil
}

// Put stores value as the tenant's secret name, replacing any previous
// value atomically: it writes a new file (mode 0600), fsyncs it and
// renames it over the old one. A value over bothy.MaxSecretBytes is
// ETOOLARGE. It is for the CLI and operators; commands only read.
func (s *Store) Put(tenantID, name string, value []byte) error {
	if err := validate(tenantID, name); err != nil {
		return err
	} else if len(value) > bothy.MaxSecretBytes {
		return bothy.Errorf(bothy.ETOOLARGE, "secret %s is over %d bytes", name, bothy.MaxSecretBytes)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("create secret directory: %w", err)
	}
	tfd, err := s.openTenant(tenantID, true)
	if err != nil {
		return err
	}
	defer syscall.Close(tfd)
	// Valid names never start with '.', so the temporary name cannot be a
	// secret's.
	r := make([]byte, 8)
	rand.Read(r)
	tmp := ".tmp-" + hex.EncodeToString(r)
	fd, err := syscall.Openat(tfd, tmp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create secret file: %w", err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(s.dir, tenantID, tmp))
	_, err = f.Write(append(append(make([]byte, 0, len(value)+1), value...), '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syscall.Renameat(tfd, tmp, tfd, name)
	}
	if err != nil {
		syscall.Unlinkat(tfd, tmp)
		return fmt.Errorf("write secret file: %w", err)
	}
	if err := syscall.Fsync(tfd); err != nil {
		return fmt.Errorf("sync tenant secret directory: %w", err)
	}
	return nil
}

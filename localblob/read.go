package localblob

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/bothyhq/bothy"
)

// GetBlob implements bothy.BlobReader. An off at or beyond the end of the
// blob yields an empty reader.
func (s *Store) GetBlob(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := validate(key, "get"); err != nil {
		return nil, err
	} else if off < 0 {
		return nil, bothy.Errorf(bothy.EINVALID, "get blob %s: negative offset %d", key, off)
	}
	f, info, err := s.open(key)
	if err != nil {
		return nil, fmt.Errorf("get blob %s: %w", key, err)
	}
	size := info.Size()
	off = min(off, size)
	if length < 0 || length > size-off {
		length = size - off
	}
	return &sectionReadCloser{io.NewSectionReader(f, off, length), f}, nil
}

// StatBlob implements bothy.BlobReader.
func (s *Store) StatBlob(ctx context.Context, key string) (bothy.BlobInfo, error) {
	if err := validate(key, "stat"); err != nil {
		return bothy.BlobInfo{}, err
	}
	info, err := os.Lstat(s.path(key))
	if isNotExist(err) {
		return bothy.BlobInfo{}, fmt.Errorf("stat blob %s: %w", key, notExist(err))
	} else if err != nil {
		return bothy.BlobInfo{}, fmt.Errorf("stat blob %s: %w", key, err)
	} else if !info.Mode().IsRegular() {
		return bothy.BlobInfo{}, fmt.Errorf("stat blob %s: not a blob: %w", key, fs.ErrNotExist)
	}
	return bothy.BlobInfo{Key: key, Size: info.Size(), ModTime: info.ModTime()}, nil
}

// DeleteBlob implements bothy.BlobRemover. It leaves the emptied directories.
func (s *Store) DeleteBlob(ctx context.Context, key string) error {
	if err := validate(key, "delete"); err != nil {
		return err
	}
	path := s.path(key)
	// Never remove a directory that a key names.
	if exists, err := isBlob(path); err != nil {
		return fmt.Errorf("delete blob %s: %w", key, err)
	} else if !exists {
		return nil
	}
	if err := os.Remove(path); err != nil && !isNotExist(err) {
		return fmt.Errorf("delete blob %s: %w", key, err)
	}
	return nil
}

// open opens the blob file for key, reporting a directory as not found.
func (s *Store) open(key string) (*os.File, fs.FileInfo, error) {
	f, err := os.Open(s.path(key))
	if isNotExist(err) {
		return nil, nil, notExist(err)
	} else if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	} else if !info.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("not a blob: %w", fs.ErrNotExist)
	}
	return f, info, nil
}

type sectionReadCloser struct {
	*io.SectionReader
	f *os.File
}

func (r *sectionReadCloser) Close() error { return r.f.Close() }

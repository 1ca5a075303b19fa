package bothy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Blob stores are content-addressed: a key names its content (for example
// "packs/<tenant>/<hash>"), so writing a key that exists is a no-op and every
// retried write is idempotent. Keys are relative slash-separated paths of
// [A-Za-z0-9._-] segments; none is "." or "..". A key is never also the
// prefix of another key followed by '/' (a local directory cannot hold both
// "a" and "a/b").
//
// Not found is reported by an error for which errors.Is(err, fs.ErrNotExist)
// holds. A store does not verify content against its key; readers do.

// BlobInfo describes one stored blob.
type BlobInfo struct {
	Key     string
	Size    int64
	ModTime time.Time // when the blob was first written
}

// BlobWriter writes blobs.
type BlobWriter interface {
	// PutBlob stores size bytes from r under key if key does not exist. If it
	// exists, PutBlob reads nothing more, keeps the stored blob and returns
	// created=false with a nil error. A concurrent writer of the same key, in
	// this or another process, never produces a partial blob.
	PutBlob(ctx context.Context, key string, r io.Reader, size int64) (created bool, err error)
}

// BlobReader reads blobs.
type BlobReader interface {
	// GetBlob streams length bytes from offset off; length < 0 means to the
	// end. An offset at or past the end gives an empty reader; a negative
	// offset is EINVALID. A missing key is fs.ErrNotExist. The caller closes
	// the reader.
	GetBlob(ctx context.Context, key string, off, length int64) (io.ReadCloser, error)
	// StatBlob returns the blob's info, or fs.ErrNotExist.
	StatBlob(ctx context.Context, key string) (BlobInfo, error)
}

// BlobLister enumerates blobs.
type BlobLister interface {
	// ListBlobs calls fn for every blob whose key starts with prefix, in key
	// order, and stops at the first error fn returns.
	ListBlobs(ctx context.Context, prefix string, fn func(BlobInfo) error) error
}

// BlobRemover deletes blobs.
type BlobRemover interface {
	// DeleteBlob removes key. Removing a missing key is not an error.
	DeleteBlob(ctx context.Context, key string) error
}

// BlobStore is a content-addressed object store: a local directory or Google
// Cloud Storage. Implementations run the conformance suite in package blobtest.
type BlobStore interface {
	BlobWriter
	BlobReader
	BlobLister
	BlobRemover
}

// ValidateBlobKey reports whether key is a well-formed blob key.
func ValidateBlobKey(key string) error {
	if key == "" || len(key) > 512 {
		return Errorf(EINVALID, "blob key must be 1 to 512 bytes")
	}
	start := 0
	for i := 0; i <= len(key); i++ {
		if i < len(key) && key[i] != '/' {
			c := key[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return Errorf(EINVALID, "blob key %q holds a character outside [A-Za-z0-9._-/]", key)
			}
			continue
		}
		seg := key[start:i]
		if seg == "" || seg == "." || seg == ".." {
			return Errorf(EINVALID, "blob key %q has an empty, '.' or '..' segment", key)
		}
		start = i + 1
	}
	return nil
}

// CopyBlob copies exactly size bytes from r to w, as PutBlob's contract
// asks, and fails if r holds fewer or more. BlobWriter implementations use it.
func CopyBlob(w io.Writer, r io.Reader, size int64) error {
	if n, err := io.CopyN(w, r, size); errors.Is(err, io.EOF) {
		return fmt.Errorf("reader ended after %d of %d bytes: %w", n, size, io.ErrUnexpectedEOF)
	} else if err != nil {
		return err
	}
	if n, err := io.ReadFull(r, make([]byte, 1)); n > 0 {
		return fmt.Errorf("reader holds more than %d bytes", size)
	} else if !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

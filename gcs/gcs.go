// Package gcs implements bothy.BlobStore on Google Cloud Storage. PutBlob
// creates objects with a does-not-exist precondition, so exactly one of
// several concurrent writers of a key creates it, in any number of processes.
package gcs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strings"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"

	"github.com/bothyhq/bothy"
)

var _ bothy.BlobStore = (*Store)(nil)

// Store is a blob store in a Google Cloud Storage bucket; the blob with key k
// is the object prefix+k.
//
// GetBlob with off at or beyond the end of the blob returns an empty reader,
// as a range read of an empty range.
type Store struct {
	client *storage.Client
	bucket *storage.BucketHandle
	prefix string
	owned  bool // Close closes client
}

// New returns a store of the objects in bucket under prefix. A non-empty
// prefix names a folder: "packs" and "packs/" both store key k as
// "packs/k". The caller keeps ownership of client.
func New(client *storage.Client, bucket, prefix string) *Store {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Store{client: client, bucket: client.Bucket(bucket), prefix: prefix}
}

// Open returns the store for a gs://bucket/prefix URL, using Application
// Default Credentials. Close releases its client.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, bothy.Errorf(bothy.EINVALID, "open gcs blob store: %v", err)
	} else if u.Scheme != "gs" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, bothy.Errorf(bothy.EINVALID, "open gcs blob store: %q is not gs://bucket[/prefix]", rawURL)
	}
	client, err := storage.NewClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("open gcs blob store: %w", err)
	}
	s := New(client, u.Host, strings.TrimPrefix(u.Path, "/"))
	s.owned = true
	return s, nil
}

// Close closes the client if Open created it.
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	return s.client.Close()
}

func (s *Store) object(key string) *storage.ObjectHandle {
	return s.bucket.Object(s.prefix + key)
}

// PutBlob implements bothy.BlobWriter. It first checks whether key exists so
// that an existing blob costs one metadata request instead of an upload.
func (s *Store) PutBlob(ctx context.Context, key string, r io.Reader, size int64) (bool, error) {
	if err := validate(key, "put"); err != nil {
		return false, err
	} else if size < 0 {
		return false, bothy.Errorf(bothy.EINVALID, "put blob %s: negative size %d", key, size)
	}
	obj := s.object(key)
	if _, err := obj.Attrs(ctx); err == nil {
		return false, nil
	} else if !errors.Is(err, storage.ErrObjectNotExist) {
		return false, fmt.Errorf("put blob %s: %w", key, err)
	}
	created, err := put(ctx, obj, r, size)
	if err != nil {
		return false, fmt.Errorf("put blob %s: %w", key, err)
	}
	return created, nil
}

func put(ctx context.Context, obj *storage.ObjectHandle, r io.Reader, size int64) (bool, error) {
	// Canceling the writer's context is the only way to abandon an upload
	// without creating the object.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := obj.If(storage.Conditions{DoesNotExist: true}).NewWriter(ctx)
	w.ContentType = "application/octet-stream"

	if err := bothy.CopyBlob(w, r, size); err != nil {
		cancel()
		closeErr := w.Close()
		// GCS may check the precondition when a resumable upload starts, so
		// a lost race can surface as a failed Write.
		if isPreconditionFailed(err) || isPreconditionFailed(closeErr) {
			return false, nil
		}
		return false, err
	}
	if err := w.Close(); isPreconditionFailed(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if attrs := w.Attrs(); attrs.Size != size {
		// Unreachable unless the upload lost bytes; remove exactly what we made.
		err := fmt.Errorf("stored %d of %d bytes", attrs.Size, size)
		if derr := obj.If(storage.Conditions{GenerationMatch: attrs.Generation}).Delete(context.WithoutCancel(ctx)); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete short object: %w", derr))
		}
		return false, err
	}
	return true, nil
}

// GetBlob implements bothy.BlobReader.
func (s *Store) GetBlob(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := validate(key, "get"); err != nil {
		return nil, err
	} else if off < 0 {
		return nil, bothy.Errorf(bothy.EINVALID, "get blob %s: negative offset %d", key, off)
	}
	rd, err := s.object(key).NewRangeReader(ctx, off, length)
	if isRangeNotSatisfiable(err) {
		// GCS answers 416 only for an object that exists, when off >= size.
		return io.NopCloser(strings.NewReader("")), nil
	} else if err != nil {
		return nil, fmt.Errorf("get blob %s: %w", key, notExist(err))
	}
	return rd, nil
}

// StatBlob implements bothy.BlobReader.
func (s *Store) StatBlob(ctx context.Context, key string) (bothy.BlobInfo, error) {
	if err := validate(key, "stat"); err != nil {
		return bothy.BlobInfo{}, err
	}
	attrs, err := s.object(key).Attrs(ctx)
	if err != nil {
		return bothy.BlobInfo{}, fmt.Errorf("stat blob %s: %w", key, notExist(err))
	}
	return bothy.BlobInfo{Key: key, Size: attrs.Size, ModTime: attrs.Created}, nil
}

// DeleteBlob implements bothy.BlobRemover.
func (s *Store) DeleteBlob(ctx context.Context, key string) error {
	if err := validate(key, "delete"); err != nil {
		return err
	}
	if err := s.object(key).Delete(ctx); err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
		return fmt.Errorf("delete blob %s: %w", key, err)
	}
	return nil
}

// ListBlobs implements bothy.BlobLister. GCS lists names in byte order,
// which is key order. Objects under the prefix whose names are not valid
// keys are skipped.
func (s *Store) ListBlobs(ctx context.Context, prefix string, fn func(bothy.BlobInfo) error) error {
	q := &storage.Query{Prefix: s.prefix + prefix}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Created"}); err != nil {
		return fmt.Errorf("list blobs %s: %w", prefix, err)
	}
	it := s.bucket.Objects(ctx, q)
	for {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return nil
		} else if err != nil {
			return fmt.Errorf("list blobs %s: %w", prefix, err)
		}
		key := strings.TrimPrefix(attrs.Name, s.prefix)
		if bothy.ValidateBlobKey(key) != nil {
			continue
		}
		if err := fn(bothy.BlobInfo{Key: key, Size: attrs.Size, ModTime: attrs.Created}); err != nil {
			return err
		}
	}
}

func validate(key, op string) error {
	if err := bothy.ValidateBlobKey(key); err != nil {
		return fmt.Errorf("%s blob: %w", op, err)
	}
	return nil
}

func isPreconditionFailed(err error) bool {
	var e *googleapi.Error
	return errors.As(err, &e) && e.Code == http.StatusPreconditionFailed
}

func isRangeNotSatisfiable(err error) bool {
	var e *googleapi.Error
	return errors.As(err, &e) && e.Code == http.StatusRequestedRangeNotSatisfiable
}

// notExist makes storage.ErrObjectNotExist satisfy errors.Is(err, fs.ErrNotExist).
func notExist(err error) error {
	if errors.Is(err, storage.ErrObjectNotExist) {
		return notExistError{err}
	}
	return err
}

type notExistError struct{ err error }

func (e notExistError) Error() string        { return e.err.Error() }
func (e notExistError) Unwrap() error        { return e.err }
func (e notExistError) Is(target error) bool { return target == fs.ErrNotExist }

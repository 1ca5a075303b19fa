// Package gcstest runs gcs stores on an in-process fake of Google Cloud
// Storage (github.com/fsouza/fake-gcs-server), for tests of any package.
package gcstest

import (
	"testing"

	"cloud.google.com/go/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/bothyhq/bothy/gcs"
)

// Bucket is the bucket that NewClient creates.
const Bucket = "bothy-test"

// New returns a store under the prefix "blobs/" of a new fake server's
// bucket. The server stops when the test ends.
func New(tb testing.TB) *gcs.Store {
	tb.Helper()
	return gcs.New(NewClient(tb), Bucket, "blobs/")
}

// NewClient starts a fake GCS server holding the empty bucket Bucket and
// returns a client of it. The server stops when the test ends.
func NewClient(tb testing.TB) *storage.Client {
	tb.Helper()
	// NoListener routes requests through an in-memory transport: no port,
	// no TLS, and srv.Client() needs no credentials.
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{NoListener: true})
	if err != nil {
		tb.Fatalf("start fake gcs server: %v", err)
	}
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: Bucket})
	client := srv.Client()
	tb.Cleanup(func() {
		client.Close()
		srv.Stop()
	})
	return client
}

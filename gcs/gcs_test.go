package gcs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/blobtest"
	"github.com/bothyhq/bothy/gcs"
	"github.com/bothyhq/bothy/gcs/gcstest"
)

func TestStore(t *testing.T) {
	blobtest.TestBlobStore(t, func(t *testing.T) bothy.BlobStore { return gcstest.New(t) })
}

// TestStore_Prefix checks that a store sees only the objects under its
// prefix, and that a store without a prefix sees the whole bucket.
func TestStore_Prefix(t *testing.T) {
	client := gcstest.NewClient(t)
	a := gcs.New(client, gcstest.Bucket, "a")
	ab := gcs.New(client, gcstest.Bucket, "ab/")
	root := gcs.New(client, gcstest.Bucket, "")
	blobtest.MustPut(t, a, "k", []byte("in a"), true)
	blobtest.MustPut(t, ab, "k", []byte("in ab"), true)
	if got := string(blobtest.MustGet(t, root, "a/k")); got != "in a" {
		t.Fatalf("a/k = %q, want %q", got, "in a")
	}
	for _, tt := range []struct {
		name string
		s    *gcs.Store
		want string
	}{
		{"a", a, "[k]"},
		{"ab", ab, "[k]"},
		{"root", root, "[a/k ab/k]"},
	} {
		var keys []string
		if err := tt.s.ListBlobs(context.Background(), "", func(info bothy.BlobInfo) error {
			keys = append(keys, info.Key)
			return nil
		}); err != nil {
			t.Fatal(err)
		} else if fmt.Sprint(keys) != tt.want {
			t.Fatalf("list %s = %q, want %s", tt.name, keys, tt.want)
		}
	}
}

func TestOpen(t *testing.T) {
	for _, url := range []string{"", "s3://bucket/x", "gs://", "gs:///x", "bucket/x", "gs://b/x?y=1"} {
		t.Run(url, func(t *testing.T) {
			if _, err := gcs.Open(context.Background(), url); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Fatalf("open %q: err = %v, want EINVALID", url, err)
			}
		})
	}
}

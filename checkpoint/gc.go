package checkpoint

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
)

// GCOptions configures GC.
type GCOptions struct {
	// Grace is the age below which a pack is never deleted (0 = DefaultGrace).
	// It must be at least 2*MaxCommitAge.
	Grace time.Duration
	// Now is the current time (zero = time.Now()); tests move it forward.
	Now time.Time
	// DryRun counts what would be deleted without deleting it.
	DryRun bool
}

// GCResult counts what GC saw and did.
type GCResult struct {
	Tenants      int
	Packs        int64 // packs listed
	Referenced   int64 // listed packs that some revision lists
	Young        int64 // unreferenced packs kept because they are younger than Grace
	Deleted      int64
	DeletedBytes int64
}

// GC deletes, for every tenant, the packs that no revision lists and that
// are older than opts.Grace. It lists the packs before reading the
// references, so a pack old enough to delete was uploaded more than Grace
// ago; a Writer refuses to return packs more than MaxCommitAge after their
// upload, so any commit that references such a pack happened before the
// listing, and the mark sees it. docs/checkpoint-format.md has the argument.
func GC(ctx context.Context, store bothy.Store, blobs bothy.BlobStore, opts GCOptions) (GCResult, error) {
	var res GCResult
	if opts.Grace == 0 {
		opts.Grace = DefaultGrace
	}
	if opts.Grace < 2*MaxCommitAge {
		return res, bothy.Errorf(bothy.EINVALID, "gc: grace %v is below 2*MaxCommitAge (%v)", opts.Grace, 2*MaxCommitAge)
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	tenants, err := store.ListTenants(ctx)
	if err != nil {
		return res, fmt.Errorf("gc: list tenants: %w", err)
	}
	cutoff := opts.Now.Add(-opts.Grace)
	for _, t := range tenants {
		res.Tenants++
		prefix := packPrefix + t.ID + "/"
		var listed []bothy.BlobInfo
		err := blobs.ListBlobs(ctx, prefix, func(b bothy.BlobInfo) error {
			listed = append(listed, b)
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("gc: list packs of tenant %s: %w", t.ID, err)
		}
		refs := map[string]bool{}
		err = store.ReferencedPacks(ctx, t.ID, func(p string) error {
			refs[p] = true
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("gc: referenced packs of tenant %s: %w", t.ID, err)
		}
		for _, b := range listed {
			res.Packs++
			if refs[strings.TrimPrefix(b.Key, prefix)] {
				res.Referenced++
				continue
			}
			if !b.ModTime.Before(cutoff) {
				res.Young++
				continue
			}
			if !opts.DryRun {
				if err := blobs.DeleteBlob(ctx, b.Key); err != nil {
					return res, fmt.Errorf("gc: delete pack %s: %w", b.Key, err)
				}
			}
			res.Deleted++
			res.DeletedBytes += b.Size
		}
	}
	return res, nil
}

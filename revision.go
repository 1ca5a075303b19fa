package bothy

import (
	"context"
	"time"
)

// Revision is one committed state of a computer's workspace.
type Revision struct {
	TenantID   string `json:"-"`
	ComputerID string `json:"computer_id"`
	// Number counts from 1 per computer; Parent is the previous number (0 for the first).
	Number int64 `json:"number"`
	Parent int64 `json:"parent"`
	// Generation is the computer generation that committed this revision.
	Generation int64 `json:"generation"`
	// RootDigest names the root tree object in the checkpoint format.
	RootDigest string `json:"root_digest"`
	// Packs lists every pack that holds an object reachable from RootDigest,
	// sorted and without duplicates. Garbage collection keeps exactly the
	// packs that some revision lists.
	Packs     []string  `json:"-"`
	Size      int64     `json:"size"`
	FileCount int64     `json:"file_count"`
	CreatedBy string    `json:"created_by"` // a lease id or "api:<operation>"
	CreatedAt time.Time `json:"created_at"`
}

// CommitRequest asks to make a new revision current, by compare-and-swap on
// (computer, generation, base revision).
type CommitRequest struct {
	TenantID   string
	ComputerID string
	Generation int64 // must equal the computer's current generation
	Base       int64 // must equal the computer's current revision
	RootDigest string
	Packs      []string
	Size       int64
	FileCount  int64
	CreatedBy  string
	// LeaseID names the runtime lease that commits, which must be unreleased
	// and of Generation. Empty means a commit without a runtime (the API on a
	// cold computer), which is refused while any lease of the computer is
	// unreleased, so the API and a runtime never both write.
	LeaseID string
}

// Validate reports whether r is well formed.
func (r *CommitRequest) Validate() error {
	if err := ValidateID("tenant id", r.TenantID); err != nil {
		return err
	} else if err := ValidateID("computer id", r.ComputerID); err != nil {
		return err
	} else if r.RootDigest == "" {
		return Errorf(EINVALID, "commit needs a root digest")
	} else if r.Base < 0 || r.Generation < 0 {
		return Errorf(EINVALID, "commit base and generation must not be negative")
	}
	return nil
}

// RevisionService stores revisions.
type RevisionService interface {
	// CommitRevision atomically checks that the computer's generation and
	// current revision equal r.Generation and r.Base, and the lease rule of
	// r.LeaseID, inserts revision Base+1 and makes it current. On a mismatch
	// it returns ECONFLICT and changes nothing; a missing computer (or one of
	// another tenant) is ENOTFOUND.
	CommitRevision(ctx context.Context, r *CommitRequest) (*Revision, error)
	// FindRevision returns one revision, or ENOTFOUND.
	FindRevision(ctx context.Context, tenantID, computerID string, number int64) (*Revision, error)
	// ListRevisions returns a computer's revisions, newest first; a missing
	// computer, or one of another tenant, gives an empty list. Limit 0 means
	// 100, capped at 1000.
	ListRevisions(ctx context.Context, tenantID, computerID string, offset, limit int) ([]*Revision, error)
	// ReferencedPacks calls fn once for each distinct pack listed by any
	// revision of the tenant (garbage collection's mark phase).
	ReferencedPacks(ctx context.Context, tenantID string, fn func(pack string) error) error
}

// Store is the metadata store: SQLite for one machine, PostgreSQL for several
// replicas. Implementations run the conformance suite in package storetest.
type Store interface {
	TenantService
	ComputerService
	RevisionService
	LeaseService
	CommandService
	EventService
	TokenService
	ReceiptService
	Close() error
}

package bothy

import (
	"context"
	"encoding/json"
	"time"
)

// Lease dispositions, recorded when a lease is released.
const (
	LeaseReleased    = "released"    // stopped in order: checkpointed and torn down
	LeaseLost        = "lost"        // its runtime vanished (expired heartbeat, host gone)
	LeaseQuarantined = "quarantined" // teardown could not prove zero residue
	LeaseFailed      = "failed"      // the sandbox never became ready
)

// ValidDisposition reports whether d is one of the lease dispositions.
func ValidDisposition(d string) bool {
	switch d {
	case LeaseReleased, LeaseLost, LeaseQuarantined, LeaseFailed:
		return true
	}
	return false
}

// Lease is one runtime allocation of a computer: the compute it holds while
// work runs. A computer has at most one unreleased lease, and that lease's
// Generation is the computer's generation; everything its runtime sends is
// fenced by that generation. Zero times are unset.
type Lease struct {
	ID         string `json:"id"`
	TenantID   string `json:"-"`
	ComputerID string `json:"computer_id"`
	Generation int64  `json:"generation"`
	Provider   string `json:"provider"`
	Host       string `json:"host,omitempty"`
	// SandboxRef is the provider's opaque, versioned handle, given back to
	// the provider to recover the sandbox after a restart.
	SandboxRef   string `json:"sandbox_ref,omitempty"`
	CPUMillis    int64  `json:"cpu_millis"` // reserved vCPU, in thousandths
	MemoryBytes  int64  `json:"memory_bytes"`
	ScratchBytes int64  `json:"scratch_bytes"`
	// CredentialDigest is a digest of the lease credential, never the
	// credential itself.
	CredentialDigest string    `json:"-"`
	ReservedAt       time.Time `json:"reserved_at"`
	StartedAt        time.Time `json:"started_at,omitzero"`
	ReadyAt          time.Time `json:"ready_at,omitzero"`
	HeartbeatAt      time.Time `json:"heartbeat_at,omitzero"`
	// ExpiresAt is when the lease is presumed lost unless a heartbeat moves
	// it on; the reaper finds expired leases with ListExpiredLeases.
	ExpiresAt  time.Time `json:"expires_at"`
	ReleasedAt time.Time `json:"released_at,omitzero"`
	// Disposition is "" while the lease is held, then one of the Lease*
	// dispositions.
	Disposition string `json:"disposition,omitempty"`
	// Residue is the JSON teardown evidence ("" if none was recorded).
	Residue string `json:"residue,omitempty"`
	// RevisionBefore is the computer's revision when the lease was
	// acquired, RevisionAfter when it was released (set by AcquireLease and
	// ReleaseLease).
	RevisionBefore int64 `json:"revision_before"`
	RevisionAfter  int64 `json:"revision_after"`
}

// Validate reports whether l can be acquired.
func (l *Lease) Validate() error {
	if err := ValidateID("lease id", l.ID); err != nil {
		return err
	} else if err := ValidateID("tenant id", l.TenantID); err != nil {
		return err
	} else if err := ValidateID("computer id", l.ComputerID); err != nil {
		return err
	} else if l.Generation < 1 {
		return Errorf(EINVALID, "lease generation must be at least 1")
	} else if l.Provider == "" || len(l.Provider) > 64 {
		return Errorf(EINVALID, "lease provider must be 1 to 64 bytes")
	} else if l.CPUMillis < 0 || l.MemoryBytes < 0 || l.ScratchBytes < 0 {
		return Errorf(EINVALID, "lease reservations must not be negative")
	} else if l.ExpiresAt.IsZero() {
		return Errorf(EINVALID, "lease needs an expiry, so that the reaper finds it if its starter dies")
	}
	return nil
}

// ValidateResidue checks residue evidence: "" or a JSON document.
func ValidateResidue(residue string) error {
	if residue != "" && !json.Valid([]byte(residue)) {
		return Errorf(EINVALID, "lease residue must be JSON")
	}
	return nil
}

// LeaseService stores leases. Every method but ListExpiredLeases is scoped by
// tenant: a lease of another tenant is ENOTFOUND.
type LeaseService interface {
	// AcquireLease atomically, in one transaction: checks that the computer
	// has no unreleased lease and is not destroyed; moves the computer's
	// generation from l.Generation-1 (the generation the caller read) to
	// l.Generation and its state to starting; and stores l. So l.Generation
	// must be one more than the generation the caller saw. Another
	// unreleased lease, a generation that moved, or a destroyed computer is
	// ECONFLICT and changes nothing; a missing computer is ENOTFOUND.
	// AcquireLease fills ReservedAt if it is zero, sets RevisionBefore to
	// the computer's revision, and clears ReleasedAt, Disposition, Residue
	// and RevisionAfter. Of concurrent callers for one computer exactly one wins.
	AcquireLease(ctx context.Context, l *Lease) error
	// HeartbeatLease records a heartbeat now and moves the expiry to
	// expiresAt. It is fenced: a lease that is released, or whose generation
	// is not generation, is ECONFLICT; a missing lease is ENOTFOUND.
	HeartbeatLease(ctx context.Context, tenantID, leaseID string, generation int64, expiresAt time.Time) error
	// ReleaseLease sets the lease's ReleasedAt, disposition (one of the
	// Lease* dispositions), residue evidence and RevisionAfter (the
	// computer's revision, which only the lease could move), and sets its computer back
	// to cold if the computer is still at the lease's generation and not
	// destroyed. It does not change the generation: the next AcquireLease
	// does. A stale generation or an already released lease is ECONFLICT and
	// changes nothing (a caller retrying after a lost answer reads the lease
	// with FindLease); a missing lease is ENOTFOUND.
	ReleaseLease(ctx context.Context, tenantID, leaseID string, generation int64, disposition, residue string) error
	// FindLease returns the lease, released or not, or ENOTFOUND.
	FindLease(ctx context.Context, tenantID, id string) (*Lease, error)
	// ActiveLease returns the computer's unreleased lease, or ENOTFOUND if
	// it has none.
	ActiveLease(ctx context.Context, tenantID, computerID string) (*Lease, error)
	// ListExpiredLeases returns unreleased leases whose ExpiresAt is at or
	// before now, of every tenant, oldest expiry first, at most limit (0
	// means 100, capped at 1000). It is the one query that crosses tenants:
	// the reaper is a system job that must find leases whose runtime
	// vanished whoever owns them, and it acts on each lease through the
	// tenant-scoped methods with the lease's TenantID. It never serves a
	// caller's request.
	ListExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*Lease, error)
}

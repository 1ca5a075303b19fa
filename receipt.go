package bothy

import (
	"context"
	"encoding/json"
	"time"
)

// Receipt subjects: what a receipt is evidence of.
const (
	ReceiptCommand = "command" // a command that reached a terminal state
	ReceiptLease   = "lease"   // a lease that was released
)

// ReceiptVersion is the version of the ReceiptBody format.
const ReceiptVersion = 1

// MaxWorkJobIDLen bounds a work_job_id.
const MaxWorkJobIDLen = 256

// ReceiptBody is what a receipt states. Its canonical JSON encoding (package
// receipt) is what is signed; a field is only evidence if it is in the body.
// Zero times are left out.
type ReceiptBody struct {
	Version    int    `json:"version"`
	ID         string `json:"id"`
	KeyID      string `json:"key_id"` // the key that signs it, repeated in the envelope
	Kind       string `json:"kind"`   // ReceiptCommand or ReceiptLease
	TenantID   string `json:"tenant_id"`
	ComputerID string `json:"computer_id"`
	CommandID  string `json:"command_id,omitempty"`
	// LeaseID and Generation name the lease: the one a command ran on, or
	// the lease itself.
	LeaseID    string `json:"lease_id,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// WorkJobID is the caller's external reference.
	WorkJobID string `json:"work_job_id,omitempty"`
	Profile   string `json:"profile"`
	// Provider ran it; "" for a command that never reached a runtime.
	Provider string `json:"provider,omitempty"`
	// ImageDigest names what the provider ran: for now a digest of the
	// provider's name and the server's version, not of a root filesystem.
	ImageDigest string `json:"image_digest,omitempty"`
	// PolicyDigest is the SHA-256 of the canonical JSON of the server's
	// policy (Policy: profiles, limits, egress ranges).
	PolicyDigest string `json:"policy_digest"`
	// AuthorityDigest is the digest of the authority a command was
	// admitted under (Authority.Digest), "" when the server ran it.
	AuthorityDigest string `json:"authority_digest,omitempty"`
	// Egress is the computer's egress mode.
	Egress         string       `json:"egress,omitempty"`
	RevisionBefore int64        `json:"revision_before"`
	RevisionAfter  int64        `json:"revision_after"`
	Usage          ReceiptUsage `json:"usage"`
	// State, ExitCode, Signal and OutputDigest are a command's result.
	State        string `json:"state,omitempty"`
	ExitCode     *int   `json:"exit_code,omitempty"`
	Signal       string `json:"signal,omitempty"`
	OutputDigest string `json:"output_digest,omitempty"`
	// Limited lists the limits the command hit: oom_killed, pids_limited,
	// disk_limited.
	Limited []string `json:"limited,omitempty"`
	// Disposition and Residue are a lease's end: Residue is the teardown
	// evidence ({} when teardown was proven complete), absent when none was
	// reported (a lost lease).
	Disposition string          `json:"disposition,omitempty"`
	Residue     json.RawMessage `json:"residue,omitempty"`
	// CreatedAt is when the command was created or the lease reserved;
	// FinishedAt when the command ended or the lease was released.
	CreatedAt    time.Time `json:"created_at,omitzero"`
	DispatchedAt time.Time `json:"dispatched_at,omitzero"`
	StartedAt    time.Time `json:"started_at,omitzero"`
	FinishedAt   time.Time `json:"finished_at,omitzero"`
	IssuedAt     time.Time `json:"issued_at"`
}

// ReceiptUsage is the metered usage a receipt states: a command's own, or
// for a lease the total of its commands' (DurationMS is then the lease's
// life, from reservation to release).
type ReceiptUsage struct {
	DurationMS        int64 `json:"duration_ms"`
	CPUMicros         int64 `json:"cpu_us"`
	PeakMemoryBytes   int64 `json:"peak_memory_bytes"`
	MemoryByteSeconds int64 `json:"memory_byte_seconds"`
	BytesWritten      int64 `json:"bytes_written"`
	NetworkBytes      int64 `json:"network_bytes"`
}

// SetUsage copies u into the receipt's usage, all but the wall time.
func (r *ReceiptUsage) SetUsage(u Usage) {
	r.CPUMicros, r.PeakMemoryBytes, r.MemoryByteSeconds = u.CPUMicros, u.PeakMemoryBytes, u.MemoryByteSeconds
	r.BytesWritten, r.NetworkBytes = u.BytesWritten, u.NetworkBytes
}

// Receipt is a signed ReceiptBody as stored. Body holds the exact bytes that
// were signed; package receipt encodes the envelope that is served,
// {"body": {…}, "key_id": …, "signature": base64}, and verifies it.
type Receipt struct {
	TenantID    string
	ID          string
	SubjectKind string // ReceiptCommand or ReceiptLease
	SubjectID   string // the command or lease id
	Body        []byte // canonical JSON of a ReceiptBody
	KeyID       string
	Signature   []byte // Ed25519 over Body
	CreatedAt   time.Time
}

// Validate reports whether r can be stored.
func (r *Receipt) Validate() error {
	if err := ValidateID("receipt id", r.ID); err != nil {
		return err
	} else if err := ValidateID("tenant id", r.TenantID); err != nil {
		return err
	} else if r.SubjectKind != ReceiptCommand && r.SubjectKind != ReceiptLease {
		return Errorf(EINVALID, "receipt subject must be %q or %q, not %q", ReceiptCommand, ReceiptLease, r.SubjectKind)
	} else if err := ValidateID("receipt subject id", r.SubjectID); err != nil {
		return err
	} else if !json.Valid(r.Body) || len(r.Signature) == 0 {
		return Errorf(EINVALID, "a receipt needs a JSON body and a signature")
	}
	return nil
}

// ReceiptFilter selects receipts of one tenant. Empty fields match all.
type ReceiptFilter struct {
	SubjectKind   string
	Offset, Limit int // Limit 0 means 100
}

// ReceiptService stores receipts. Receipts have no foreign key: they
// outlive what they describe. Every method is scoped by tenant: another
// tenant's receipt is ENOTFOUND.
type ReceiptService interface {
	// CreateReceipt stores r, filling CreatedAt if it is zero. A subject
	// has at most one receipt: a second for the same (SubjectKind,
	// SubjectID), or an existing ID, is ECONFLICT and stores nothing.
	CreateReceipt(ctx context.Context, r *Receipt) error
	// FindReceipt returns the receipt of a subject, or ENOTFOUND.
	FindReceipt(ctx context.Context, tenantID, subjectKind, subjectID string) (*Receipt, error)
	// ListReceipts returns the tenant's receipts that match f, ordered by
	// creation time, then ID. Limit 0 means 100, capped at 1000; a negative
	// offset or limit is EINVALID.
	ListReceipts(ctx context.Context, tenantID string, f ReceiptFilter) ([]*Receipt, error)
}

// ReceiptKey is the public half of the key that signs receipts.
type ReceiptKey struct {
	KeyID     string `json:"key_id"`
	Algorithm string `json:"algorithm"`  // "ed25519"
	PublicKey []byte `json:"public_key"` // 32 bytes, base64 in JSON
}

// ReceiptIssuer serves receipts; the control plane is one. It is an
// optional ability of a server: without one, the API serves stored
// receipts only.
type ReceiptIssuer interface {
	// CommandReceipt returns the receipt of an ended command, signing and
	// storing it first if it is missing (the process that ended the command
	// died before it did). A command that has not ended is ENOTFOUND.
	CommandReceipt(ctx context.Context, tenantID, commandID string) (*Receipt, error)
	// LeaseReceipt is CommandReceipt for a released lease.
	LeaseReceipt(ctx context.Context, tenantID, leaseID string) (*Receipt, error)
	// ReceiptKey returns the public key that verifies the receipts it signs.
	ReceiptKey() *ReceiptKey
}

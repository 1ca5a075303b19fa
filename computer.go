package bothy

import (
	"context"
	"time"
)

// Computer states. A cold computer holds no compute.
const (
	StateCold      = "cold"
	StateQueued    = "queued"
	StateStarting  = "starting"
	StateActive    = "active"
	StateStopping  = "stopping"
	StateFailed    = "failed"
	StateDestroyed = "destroyed"
)

// ValidState reports whether s is one of the computer states.
func ValidState(s string) bool {
	switch s {
	case StateCold, StateQueued, StateStarting, StateActive, StateStopping, StateFailed, StateDestroyed:
		return true
	}
	return false
}

// Computer is the durable, logical computer. Its workspace is the revision
// Revision (0 means the empty workspace, before any commit).
type Computer struct {
	ID string `json:"id"`
	// TenantID is never shown: the caller's token names the tenant.
	TenantID string `json:"-"`
	// Owner is the owner of the token that created it, or of its
	// conversation: only tokens of this owner, or with ScopeComputersAny,
	// may act on it ("" for a computer of an older server: AnyOwner only).
	Owner string `json:"owner"`
	// ConversationID groups computers; a conversation belongs to the owner
	// of its first computer, and every computer in it to that owner.
	ConversationID string `json:"conversation_id"`
	Label          string `json:"label"`
	// WorkJobID is the caller's external reference, stated in receipts.
	WorkJobID string `json:"work_job_id,omitempty"`
	Profile   string `json:"profile"`
	State     string `json:"state"`
	// Generation increases each time a new lease becomes active; a commit
	// must name the current generation.
	Generation int64 `json:"generation"`
	// Revision is the number of the current revision, 0 before the first commit.
	Revision int64 `json:"revision"`
	// RootDigest is the current revision's root tree digest ("" when empty).
	RootDigest string `json:"root_digest"`
	// Egress is what its commands may reach on the network; the zero
	// value is none.
	Egress EgressPolicy `json:"egress"`
	// Authority is its creator's authority, snapshotted at creation: it
	// bounds the computer's budget. Nil for computers of older servers.
	Authority *Authority `json:"authority,omitempty"`
	// Usage is the total of its commands' usage (computed when read).
	Usage     Usage     `json:"usage"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Validate reports whether c can be created.
func (c *Computer) Validate() error {
	if err := ValidateID("computer id", c.ID); err != nil {
		return err
	} else if err := ValidateID("tenant id", c.TenantID); err != nil {
		return err
	} else if c.Profile == "" {
		return Errorf(EINVALID, "computer profile is required")
	} else if len(c.Label) > 256 || len(c.ConversationID) > 256 || len(c.Owner) > 256 {
		return Errorf(EINVALID, "computer owner, label and conversation id must be at most 256 bytes")
	} else if len(c.WorkJobID) > MaxWorkJobIDLen {
		return Errorf(EINVALID, "work_job_id must be at most %d bytes", MaxWorkJobIDLen)
	}
	return c.Egress.Validate()
}

// ComputerFilter selects computers of one tenant. Empty fields match all.
type ComputerFilter struct {
	// Owner keeps only that owner's computers: an API caller's list is
	// its owner's unless its token holds ScopeComputersAny.
	Owner          string
	ConversationID string
	Label          string
	State          string
	Offset, Limit  int // Limit 0 means 100
}

// ComputerService stores computers. Every method is scoped by tenant: a
// computer of another tenant is ENOTFOUND.
type ComputerService interface {
	// CreateComputer stores c with State cold, Generation 0 and Revision 0
	// unless set, and fills CreatedAt if it is zero. An existing ID returns
	// ECONFLICT, a missing tenant ENOTFOUND, an unknown state EINVALID.
	// Stored times come back in UTC with microsecond precision. The first
	// computer of a conversation makes its Owner the conversation's owner,
	// atomically; a computer of another owner in that conversation is
	// ENOTFOUND (the conversation is not this owner's) and is not stored.
	CreateComputer(ctx context.Context, c *Computer) error
	// ConversationOwner returns the owner of a conversation of the tenant,
	// or ENOTFOUND if it has no computer yet.
	ConversationOwner(ctx context.Context, tenantID, conversationID string) (string, error)
	// FindComputer returns the computer, or ENOTFOUND.
	FindComputer(ctx context.Context, tenantID, id string) (*Computer, error)
	// ListComputers returns the tenant's computers ordered by creation time,
	// then ID. Limit 0 means 100, and it is capped at 1000; a negative offset
	// or limit is EINVALID.
	ListComputers(ctx context.Context, tenantID string, f ComputerFilter) ([]*Computer, error)
	// SetComputerState sets the state, or returns ENOTFOUND. An unknown
	// state is EINVALID.
	SetComputerState(ctx context.Context, tenantID, id, state string) error
	// AddComputerUsage adds u to the computer's usage totals, as a
	// command's end does (the peak is the larger): for work no command was
	// charged for, such as background processes that outlived their
	// command. A missing computer is ENOTFOUND.
	AddComputerUsage(ctx context.Context, tenantID, id string, u Usage) error
}

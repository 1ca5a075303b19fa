package bothy

import (
	"context"
	"crypto/rand"
	"time"
)

// Tenant is an isolation boundary: every stored row belongs to exactly one
// tenant, and every query names it.
type Tenant struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// HashKey is the tenant's 32-byte key for keyed BLAKE3 content addresses,
	// so that deduplication can never confirm another tenant's content.
	// It is never returned by the API.
	HashKey   []byte    `json:"-"`
	CreatedAt time.Time `json:"created_at"`
}

// NewTenant returns a tenant with a new random hash key, ready to store.
func NewTenant(id, name string) (*Tenant, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return &Tenant{ID: id, Name: name, HashKey: key}, nil
}

// Validate reports whether the tenant can be stored.
func (t *Tenant) Validate() error {
	if err := ValidateID("tenant id", t.ID); err != nil {
		return err
	}
	if len(t.HashKey) != 32 {
		return Errorf(EINVALID, "tenant hash key must be 32 bytes")
	}
	return nil
}

// TenantService stores tenants. Tenants and ListTenants are for operators and
// system jobs such as garbage collection, never for a caller's request.
type TenantService interface {
	// CreateTenant stores t. An existing ID returns ECONFLICT.
	CreateTenant(ctx context.Context, t *Tenant) error
	// FindTenant returns the tenant, or ENOTFOUND.
	FindTenant(ctx context.Context, id string) (*Tenant, error)
	// ListTenants returns every tenant, ordered by ID.
	ListTenants(ctx context.Context) ([]*Tenant, error)
}

// ValidateID checks an identifier: 1–128 characters of [A-Za-z0-9_.-], not
// starting with '.' or '-'.
func ValidateID(what, id string) error {
	if id == "" || len(id) > 128 {
		return Errorf(EINVALID, "%s must be 1 to 128 characters", what)
	}
	for i, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || (i > 0 && (c == '-' || c == '.'))
		if !ok {
			return Errorf(EINVALID, "%s %q may hold only letters, digits, '_', '-' and '.'", what, id)
		}
	}
	return nil
}

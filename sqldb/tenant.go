package sqldb

import (
	"context"
	"fmt"

	"github.com/bothyhq/bothy"
)

// CreateTenant stores t and fills CreatedAt if it is zero. An existing ID
// returns ECONFLICT.
func (s *DB) CreateTenant(ctx context.Context, t *bothy.Tenant) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("create tenant: %w", err)
	}
	created := fillTime(t.CreatedAt)
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO tenants (id, name, hash_key, created_at) VALUES (?, ?, ?, ?)`),
		t.ID, t.Name, t.HashKey, s.timeArg(created))
	if err != nil {
		return fmt.Errorf("create tenant: %w", s.conflict(err, "tenant %q already exists", t.ID))
	}
	t.CreatedAt = created
	return nil
}

// FindTenant returns the tenant, or ENOTFOUND.
func (s *DB) FindTenant(ctx context.Context, id string) (*bothy.Tenant, error) {
	t := &bothy.Tenant{}
	err := s.db.QueryRowContext(ctx, s.q(`SELECT id, name, hash_key, created_at FROM tenants WHERE id = ?`), id).
		Scan(&t.ID, &t.Name, &t.HashKey, scanTime(&t.CreatedAt))
	if err != nil {
		return nil, fmt.Errorf("find tenant: %w", notFound(s.classify(err), "tenant %q not found", id))
	}
	return t, nil
}

// ListTenants returns every tenant, ordered by ID.
func (s *DB) ListTenants(ctx context.Context) ([]*bothy.Tenant, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, hash_key, created_at FROM tenants ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	defer rows.Close()
	ts := []*bothy.Tenant{}
	for rows.Next() {
		t := &bothy.Tenant{}
		if err := rows.Scan(&t.ID, &t.Name, &t.HashKey, scanTime(&t.CreatedAt)); err != nil {
			return nil, fmt.Errorf("list tenants: %w", err)
		}
		ts = append(ts, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return ts, nil
}

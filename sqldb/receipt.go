package sqldb

import (
	"context"
	"fmt"

	"github.com/bothyhq/bothy"
)

// receiptColumns is the column list that scanReceipt reads.
const receiptColumns = `tenant_id, id, subject_kind, subject_id, body, key_id, signature, created_at`

func scanReceipt(r scanner) (*bothy.Receipt, error) {
	rc := &bothy.Receipt{}
	err := r.Scan(&rc.TenantID, &rc.ID, &rc.SubjectKind, &rc.SubjectID, &rc.Body, &rc.KeyID, &rc.Signature, scanTime(&rc.CreatedAt))
	if err != nil {
		return nil, err
	}
	return rc, nil
}

// CreateReceipt stores r. The unique index on its subject makes a second
// receipt for one command or lease ECONFLICT.
func (s *DB) CreateReceipt(ctx context.Context, r *bothy.Receipt) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("create receipt: %w", err)
	}
	created := fillTime(r.CreatedAt)
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO receipts (`+receiptColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
		r.TenantID, r.ID, r.SubjectKind, r.SubjectID, r.Body, r.KeyID, r.Signature, s.timeArg(created))
	if err != nil {
		return fmt.Errorf("create receipt: %w", s.conflict(err, "%s %q already has a receipt, or receipt %q exists", r.SubjectKind, r.SubjectID, r.ID))
	}
	r.CreatedAt = created
	return nil
}

// FindReceipt returns the receipt of a subject, or ENOTFOUND.
func (s *DB) FindReceipt(ctx context.Context, tenantID, subjectKind, subjectID string) (*bothy.Receipt, error) {
	row := s.db.QueryRowContext(ctx, s.q(`SELECT `+receiptColumns+` FROM receipts
		WHERE tenant_id = ? AND subject_kind = ? AND subject_id = ?`), tenantID, subjectKind, subjectID)
	r, err := scanReceipt(row)
	if err != nil {
		return nil, fmt.Errorf("find receipt: %w", notFound(s.classify(err), "%s %q has no receipt", subjectKind, subjectID))
	}
	return r, nil
}

// ListReceipts returns the tenant's receipts that match f, ordered by
// creation time, then ID.
func (s *DB) ListReceipts(ctx context.Context, tenantID string, f bothy.ReceiptFilter) ([]*bothy.Receipt, error) {
	offset, limit, err := page(f.Offset, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list receipts: %w", err)
	}
	where, args := "tenant_id = ?", []any{tenantID}
	if f.SubjectKind != "" {
		where, args = where+" AND subject_kind = ?", append(args, f.SubjectKind)
	}
	args = append(args, limit, offset)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+receiptColumns+` FROM receipts WHERE `+where+
		` ORDER BY created_at, id LIMIT ? OFFSET ?`), args...)
	if err != nil {
		return nil, fmt.Errorf("list receipts: %w", err)
	}
	defer rows.Close()
	rs := []*bothy.Receipt{}
	for rows.Next() {
		r, err := scanReceipt(rows)
		if err != nil {
			return nil, fmt.Errorf("list receipts: %w", err)
		}
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list receipts: %w", err)
	}
	return rs, nil
}

package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/bothyhq/bothy"
)

// CommitRevision makes revision r.Base+1 current by compare-and-swap on the
// computer's (generation, revision), and stores the revision and its packs, in
// one transaction. A stale generation or base returns ECONFLICT and changes
// nothing; a missing computer, or one of another tenant, returns ENOTFOUND.
// The returned revision lists its packs sorted and without duplicates, as
// FindRevision does.
//
// The compare-and-swap is a single conditional UPDATE, so it is exact on
// both engines: PostgreSQL (READ COMMITTED) re-evaluates the WHERE clause
// after waiting for the row lock of a concurrent commit, and SQLite runs
// writers one at a time (BEGIN IMMEDIATE).
func (s *DB) CommitRevision(ctx context.Context, r *bothy.CommitRequest) (*bothy.Revision, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("commit revision: %w", err)
	}
	rev := &bothy.Revision{
		TenantID:   r.TenantID,
		ComputerID: r.ComputerID,
		Number:     r.Base + 1,
		Parent:     r.Base,
		Generation: r.Generation,
		RootDigest: r.RootDigest,
		Packs:      sortedPacks(r.Packs),
		Size:       r.Size,
		FileCount:  r.FileCount,
		CreatedBy:  r.CreatedBy,
		CreatedAt:  now(),
	}
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		if err := s.commitLease(ctx, tx, r); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.q(`UPDATE computers SET revision = ?, root_digest = ?, updated_at = ?
			WHERE tenant_id = ? AND id = ? AND generation = ? AND revision = ?`),
			rev.Number, rev.RootDigest, s.timeArg(rev.CreatedAt), r.TenantID, r.ComputerID, r.Generation, r.Base)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return s.commitMismatch(ctx, tx, r)
		}
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO revisions
			(tenant_id, computer_id, number, parent, generation, root_digest, size, file_count, created_by, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			rev.TenantID, rev.ComputerID, rev.Number, rev.Parent, rev.Generation, rev.RootDigest,
			rev.Size, rev.FileCount, rev.CreatedBy, s.timeArg(rev.CreatedAt))
		if err != nil {
			// Only a computer row whose revision was moved back could get here.
			return s.conflict(err, "revision %d of computer %q already exists", rev.Number, rev.ComputerID)
		}
		for _, p := range rev.Packs {
			_, err := tx.ExecContext(ctx, s.q(`INSERT INTO revision_packs (tenant_id, computer_id, number, pack) VALUES (?, ?, ?, ?)`),
				rev.TenantID, rev.ComputerID, rev.Number, p)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("commit revision: %w", err)
	}
	return rev, nil
}

// commitLease enforces the lease rule of a commit. A runtime's commit locks
// its lease row (a no-op UPDATE, the same fence as its other writes), so a
// concurrent release waits for the commit or the commit sees the release. A
// commit without a lease needs the computer to have no unreleased lease.
func (s *DB) commitLease(ctx context.Context, tx *sql.Tx, r *bothy.CommitRequest) error {
	if r.LeaseID != "" {
		res, err := tx.ExecContext(ctx, s.q(`UPDATE leases SET generation = generation
			WHERE tenant_id = ? AND id = ? AND computer_id = ? AND generation = ? AND released_at IS NULL`),
			r.TenantID, r.LeaseID, r.ComputerID, r.Generation)
		if err != nil {
			return err
		} else if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return bothy.Errorf(bothy.ECONFLICT, "lease %q of computer %q is released or not of generation %d",
				r.LeaseID, r.ComputerID, r.Generation)
		}
		return nil
	}
	var n int
	err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM leases
		WHERE tenant_id = ? AND computer_id = ? AND released_at IS NULL`), r.TenantID, r.ComputerID).Scan(&n)
	if err != nil {
		return err
	} else if n > 0 {
		return bothy.Errorf(bothy.ECONFLICT, "computer %q has a running lease; only that lease may commit", r.ComputerID)
	}
	return nil
}

// commitMismatch explains why the compare-and-swap matched no row.
func (s *DB) commitMismatch(ctx context.Context, tx *sql.Tx, r *bothy.CommitRequest) error {
	c, err := s.findComputer(ctx, tx, r.TenantID, r.ComputerID)
	if err != nil {
		return err
	}
	return bothy.Errorf(bothy.ECONFLICT, "computer %q is at generation %d revision %d, not generation %d revision %d",
		r.ComputerID, c.Generation, c.Revision, r.Generation, r.Base)
}

// sortedPacks returns packs sorted, without duplicates or empty names.
func sortedPacks(packs []string) []string {
	out := slices.DeleteFunc(slices.Clone(packs), func(p string) bool { return p == "" })
	slices.Sort(out)
	return slices.Compact(out)
}

const revisionColumns = `tenant_id, computer_id, number, parent, generation, root_digest, size, file_count, created_by, created_at`

func scanRevision(r scanner) (*bothy.Revision, error) {
	rev := &bothy.Revision{}
	err := r.Scan(&rev.TenantID, &rev.ComputerID, &rev.Number, &rev.Parent, &rev.Generation, &rev.RootDigest,
		&rev.Size, &rev.FileCount, &rev.CreatedBy, scanTime(&rev.CreatedAt))
	if err != nil {
		return nil, err
	}
	rev.Packs = []string{}
	return rev, nil
}

// FindRevision returns one revision with its packs, or ENOTFOUND.
func (s *DB) FindRevision(ctx context.Context, tenantID, computerID string, number int64) (*bothy.Revision, error) {
	row := s.db.QueryRowContext(ctx, s.q(`SELECT `+revisionColumns+` FROM revisions
		WHERE tenant_id = ? AND computer_id = ? AND number = ?`), tenantID, computerID, number)
	rev, err := scanRevision(row)
	if err != nil {
		return nil, fmt.Errorf("find revision: %w", notFound(s.classify(err), "revision %d of computer %q not found", number, computerID))
	}
	if err := s.loadPacks(ctx, tenantID, computerID, number, number, []*bothy.Revision{rev}); err != nil {
		return nil, fmt.Errorf("find revision: %w", err)
	}
	return rev, nil
}

// ListRevisions returns a computer's revisions with their packs, newest
// first. Limit 0 means DefaultLimit; limits above MaxLimit are capped. A
// missing computer has no revisions.
func (s *DB) ListRevisions(ctx context.Context, tenantID, computerID string, offset, limit int) ([]*bothy.Revision, error) {
	offset, limit, err := page(offset, limit)
	if err != nil {
		return nil, fmt.Errorf("list revisions: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+revisionColumns+` FROM revisions
		WHERE tenant_id = ? AND computer_id = ? ORDER BY number DESC LIMIT ? OFFSET ?`), tenantID, computerID, limit, offset)
	if err != nil {
		return nil, fmt.Errorf("list revisions: %w", err)
	}
	defer rows.Close()
	revs := []*bothy.Revision{}
	for rows.Next() {
		rev, err := scanRevision(rows)
		if err != nil {
			return nil, fmt.Errorf("list revisions: %w", err)
		}
		revs = append(revs, rev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list revisions: %w", err)
	}
	rows.Close()
	if len(revs) > 0 {
		if err := s.loadPacks(ctx, tenantID, computerID, revs[len(revs)-1].Number, revs[0].Number, revs); err != nil {
			return nil, fmt.Errorf("list revisions: %w", err)
		}
	}
	return revs, nil
}

// loadPacks fills the Packs of revs, which hold every revision numbered from
// lo to hi, in one query. Revisions never change once committed, so reading
// them and their packs in two statements is consistent.
func (s *DB) loadPacks(ctx context.Context, tenantID, computerID string, lo, hi int64, revs []*bothy.Revision) error {
	byNumber := make(map[int64]*bothy.Revision, len(revs))
	for _, rev := range revs {
		byNumber[rev.Number] = rev
	}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT number, pack FROM revision_packs
		WHERE tenant_id = ? AND computer_id = ? AND number BETWEEN ? AND ? ORDER BY number, pack`), tenantID, computerID, lo, hi)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var n int64
		var p string
		if err := rows.Scan(&n, &p); err != nil {
			return err
		}
		if rev := byNumber[n]; rev != nil {
			rev.Packs = append(rev.Packs, p)
		}
	}
	return rows.Err()
}

// referencedPacksBatch is how many pack names ReferencedPacks reads per query.
const referencedPacksBatch = 1000

// ReferencedPacks calls fn once for each distinct pack listed by any revision
// of the tenant, in byte order, and stops at the first error fn returns. It
// reads in batches and holds no cursor open while fn runs, so fn may use the
// store.
func (s *DB) ReferencedPacks(ctx context.Context, tenantID string, fn func(pack string) error) error {
	after := ""
	for {
		batch, err := s.packsAfter(ctx, tenantID, after)
		if err != nil {
			return fmt.Errorf("referenced packs: %w", err)
		}
		for _, p := range batch {
			if err := fn(p); err != nil {
				return err
			}
		}
		if len(batch) < referencedPacksBatch {
			return nil
		}
		after = batch[len(batch)-1]
	}
}

// packsAfter returns the next batch of the tenant's distinct packs that sort
// after after. Every stored pack name is non-empty, so after "" starts.
func (s *DB) packsAfter(ctx context.Context, tenantID, after string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT DISTINCT pack FROM revision_packs
		WHERE tenant_id = ? AND pack > ? ORDER BY pack LIMIT ?`), tenantID, after, referencedPacksBatch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var packs []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		packs = append(packs, p)
	}
	return packs, rows.Err()
}

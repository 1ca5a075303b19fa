package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/bothyhq/bothy"
)

// leaseColumns is the column list that scanLease reads.
const leaseColumns = `tenant_id, id, computer_id, generation, provider, host, sandbox_ref, cpu_millis, memory_bytes,
	scratch_bytes, credential_digest, reserved_at, started_at, ready_at, heartbeat_at, expires_at, released_at,
	disposition, residue, revision_before, revision_after`

func scanLease(r scanner) (*bothy.Lease, error) {
	l := &bothy.Lease{}
	err := r.Scan(&l.TenantID, &l.ID, &l.ComputerID, &l.Generation, &l.Provider, &l.Host, &l.SandboxRef,
		&l.CPUMillis, &l.MemoryBytes, &l.ScratchBytes, &l.CredentialDigest, scanTime(&l.ReservedAt),
		scanTime(&l.StartedAt), scanTime(&l.ReadyAt), scanTime(&l.HeartbeatAt), scanTime(&l.ExpiresAt),
		scanTime(&l.ReleasedAt), &l.Disposition, &l.Residue, &l.RevisionBefore, &l.RevisionAfter)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// AcquireLease moves the computer from generation l.Generation-1 to
// l.Generation and state starting, and stores l, in one transaction. See
// bothy.LeaseService.
//
// The compare-and-swap is one conditional UPDATE of the computer row: on
// PostgreSQL (READ COMMITTED) a concurrent acquirer waits for the row lock
// and then re-evaluates the generation, which has moved, so it matches no
// row; SQLite runs writers one at a time. The partial unique index
// leases_one_open backs the "one unreleased lease" rule in the schema.
func (s *DB) AcquireLease(ctx context.Context, l *bothy.Lease) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("acquire lease: %w", err)
	}
	out := *l
	out.ReservedAt = fillTime(l.ReservedAt)
	out.StartedAt, out.ReadyAt, out.HeartbeatAt = utcMicro(l.StartedAt), utcMicro(l.ReadyAt), utcMicro(l.HeartbeatAt)
	out.ExpiresAt = utcMicro(l.ExpiresAt)
	out.ReleasedAt, out.Disposition, out.Residue, out.RevisionAfter = time.Time{}, "", "", 0
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`UPDATE computers SET generation = ?, state = ?, updated_at = ?
			WHERE tenant_id = ? AND id = ? AND generation = ? AND state <> ?
			AND NOT EXISTS (SELECT 1 FROM leases WHERE tenant_id = ? AND computer_id = ? AND released_at IS NULL)`),
			out.Generation, bothy.StateStarting, s.timeArg(now()), out.TenantID, out.ComputerID, out.Generation-1,
			bothy.StateDestroyed, out.TenantID, out.ComputerID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return s.acquireMismatch(ctx, tx, &out)
		}
		if err := tx.QueryRowContext(ctx, s.q(`SELECT revision FROM computers WHERE tenant_id = ? AND id = ?`),
			out.TenantID, out.ComputerID).Scan(&out.RevisionBefore); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO leases (`+leaseColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			out.TenantID, out.ID, out.ComputerID, out.Generation, out.Provider, out.Host, out.SandboxRef,
			out.CPUMillis, out.MemoryBytes, out.ScratchBytes, out.CredentialDigest, s.timeArg(out.ReservedAt),
			s.nullTimeArg(out.StartedAt), s.nullTimeArg(out.ReadyAt), s.nullTimeArg(out.HeartbeatAt),
			s.nullTimeArg(out.ExpiresAt), nil, "", "", out.RevisionBefore, 0)
		return s.conflict(err, "lease %q already exists", out.ID)
	})
	if err != nil {
		return fmt.Errorf("acquire lease: %w", err)
	}
	*l = out
	return nil
}

// acquireMismatch explains why AcquireLease's compare-and-swap matched no row.
func (s *DB) acquireMismatch(ctx context.Context, tx *sql.Tx, l *bothy.Lease) error {
	c, err := s.findComputer(ctx, tx, l.TenantID, l.ComputerID)
	if err != nil {
		return err
	}
	if c.State == bothy.StateDestroyed {
		return bothy.Errorf(bothy.ECONFLICT, "computer %q is destroyed", c.ID)
	}
	if open, err := s.activeLease(ctx, tx, l.TenantID, l.ComputerID); err == nil {
		return bothy.Errorf(bothy.ECONFLICT, "computer %q already holds lease %q at generation %d", c.ID, open.ID, open.Generation)
	} else if bothy.ErrorCode(err) != bothy.ENOTFOUND {
		return err
	}
	return bothy.Errorf(bothy.ECONFLICT, "computer %q is at generation %d, so lease generation %d is not next",
		c.ID, c.Generation, l.Generation)
}

// HeartbeatLease records a heartbeat and moves the expiry, fenced by
// generation.
func (s *DB) HeartbeatLease(ctx context.Context, tenantID, leaseID string, generation int64, expiresAt time.Time) error {
	if expiresAt.IsZero() {
		return fmt.Errorf("heartbeat lease: %w", bothy.Errorf(bothy.EINVALID, "heartbeat needs an expiry"))
	}
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`UPDATE leases SET heartbeat_at = ?, expires_at = ?
			WHERE tenant_id = ? AND id = ? AND generation = ? AND released_at IS NULL`),
			s.timeArg(now()), s.timeArg(utcMicro(expiresAt)), tenantID, leaseID, generation)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return s.leaseMismatch(ctx, tx, tenantID, leaseID, generation)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("heartbeat lease: %w", err)
	}
	return nil
}

// ReleaseLease releases the lease and sets its computer back to cold if the
// computer is still at the lease's generation.
func (s *DB) ReleaseLease(ctx context.Context, tenantID, leaseID string, generation int64, disposition, residue string) error {
	if !bothy.ValidDisposition(disposition) {
		return fmt.Errorf("release lease: %w", bothy.Errorf(bothy.EINVALID, "unknown lease disposition %q", disposition))
	} else if err := bothy.ValidateResidue(residue); err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		at := s.timeArg(now())
		var computerID string
		// Only this lease could commit while it was unreleased, so the
		// computer's revision is what it left.
		err := tx.QueryRowContext(ctx, s.q(`UPDATE leases SET released_at = ?, disposition = ?, residue = ?,
			revision_after = (SELECT c.revision FROM computers c WHERE c.tenant_id = leases.tenant_id AND c.id = leases.computer_id)
			WHERE tenant_id = ? AND id = ? AND generation = ? AND released_at IS NULL RETURNING computer_id`),
			at, disposition, residue, tenantID, leaseID, generation).Scan(&computerID)
		if errors.Is(err, sql.ErrNoRows) {
			return s.leaseMismatch(ctx, tx, tenantID, leaseID, generation)
		} else if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, s.q(`UPDATE computers SET state = ?, updated_at = ?
			WHERE tenant_id = ? AND id = ? AND generation = ? AND state <> ?`),
			bothy.StateCold, at, tenantID, computerID, generation, bothy.StateDestroyed)
		return err
	})
	if err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	return nil
}

// lockLease locks the unreleased lease of generation for the rest of tx and
// returns its computer, or explains why there is none. Writes fenced by a
// lease take this lock first: a concurrent ReleaseLease either commits
// before (and the fenced write sees it released) or waits until tx ends. On
// PostgreSQL the no-op UPDATE takes the row lock and re-evaluates the WHERE
// clause after waiting; SQLite runs writers one at a time.
func (s *DB) lockLease(ctx context.Context, tx *sql.Tx, tenantID, leaseID string, generation int64) (string, error) {
	var computerID string
	err := tx.QueryRowContext(ctx, s.q(`UPDATE leases SET generation = generation
		WHERE tenant_id = ? AND id = ? AND generation = ? AND released_at IS NULL RETURNING computer_id`),
		tenantID, leaseID, generation).Scan(&computerID)
	if errors.Is(err, sql.ErrNoRows) {
		return "", s.leaseMismatch(ctx, tx, tenantID, leaseID, generation)
	}
	return computerID, err
}

// leaseMismatch explains why a write fenced by (lease, generation) matched no
// row: ENOTFOUND, or ECONFLICT for a released lease or another generation.
func (s *DB) leaseMismatch(ctx context.Context, tx *sql.Tx, tenantID, leaseID string, generation int64) error {
	l, err := s.findLease(ctx, tx, tenantID, leaseID)
	if err != nil {
		return err
	}
	if l.Generation != generation {
		return bothy.Errorf(bothy.ECONFLICT, "lease %q is of generation %d, not %d", leaseID, l.Generation, generation)
	}
	return bothy.Errorf(bothy.ECONFLICT, "lease %q is released (%s)", leaseID, l.Disposition)
}

// FindLease returns the lease, or ENOTFOUND.
func (s *DB) FindLease(ctx context.Context, tenantID, id string) (*bothy.Lease, error) {
	l, err := s.findLease(ctx, s.db, tenantID, id)
	if err != nil {
		return nil, fmt.Errorf("find lease: %w", err)
	}
	return l, nil
}

func (s *DB) findLease(ctx context.Context, q queryer, tenantID, id string) (*bothy.Lease, error) {
	row := q.QueryRowContext(ctx, s.q(`SELECT `+leaseColumns+` FROM leases WHERE tenant_id = ? AND id = ?`), tenantID, id)
	l, err := scanLease(row)
	return l, notFound(err, "lease %q not found", id)
}

// ActiveLease returns the computer's unreleased lease, or ENOTFOUND.
func (s *DB) ActiveLease(ctx context.Context, tenantID, computerID string) (*bothy.Lease, error) {
	l, err := s.activeLease(ctx, s.db, tenantID, computerID)
	if err != nil {
		return nil, fmt.Errorf("active lease: %w", err)
	}
	return l, nil
}

func (s *DB) activeLease(ctx context.Context, q queryer, tenantID, computerID string) (*bothy.Lease, error) {
	row := q.QueryRowContext(ctx, s.q(`SELECT `+leaseColumns+` FROM leases
		WHERE tenant_id = ? AND computer_id = ? AND released_at IS NULL`), tenantID, computerID)
	l, err := scanLease(row)
	return l, notFound(err, "computer %q holds no lease", computerID)
}

// ListExpiredLeases returns unreleased leases of every tenant that expired at
// or before now, oldest expiry first. It is the one query without a tenant:
// the reaper must find a vanished runtime's lease whoever owns it.
func (s *DB) ListExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*bothy.Lease, error) {
	_, limit, err := page(0, limit)
	if err != nil {
		return nil, fmt.Errorf("list expired leases: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+leaseColumns+` FROM leases
		WHERE released_at IS NULL AND expires_at <= ? ORDER BY expires_at, tenant_id, id LIMIT ?`), s.timeArg(utcMicro(now)), limit)
	if err != nil {
		return nil, fmt.Errorf("list expired leases: %w", err)
	}
	defer rows.Close()
	ls := []*bothy.Lease{}
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, fmt.Errorf("list expired leases: %w", err)
		}
		ls = append(ls, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list expired leases: %w", err)
	}
	return ls, nil
}

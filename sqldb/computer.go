package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
)

// computerColumns is the column list that scanComputer reads.
const computerColumns = `tenant_id, id, owner, conversation_id, label, profile, state, generation, revision, root_digest, created_at, updated_at, work_job_id, egress, authority`

// computerSelect reads computerColumns and the usage totals of the
// computer's commands, which TransitionCommand keeps.
const computerSelect = `SELECT ` + computerColumns + `, used_cpu_us, used_peak_memory_bytes, used_memory_byte_seconds,
	used_bytes_written, used_network_bytes, used_wall_millis FROM computers`

// CreateComputer stores c with State cold, Generation 0 and Revision 0 unless
// set, and fills CreatedAt (if zero) and UpdatedAt. An existing ID returns
// ECONFLICT; a missing tenant returns ENOTFOUND.
func (s *DB) CreateComputer(ctx context.Context, c *bothy.Computer) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("create computer: %w", err)
	}
	state := c.State
	if state == "" {
		state = bothy.StateCold
	} else if !bothy.ValidState(state) {
		return fmt.Errorf("create computer: %w", bothy.Errorf(bothy.EINVALID, "unknown computer state %q", state))
	}
	if c.Generation < 0 || c.Revision < 0 {
		return fmt.Errorf("create computer: %w", bothy.Errorf(bothy.EINVALID, "computer generation and revision must not be negative"))
	}
	c.Egress.Normalize()
	egress, err := json.Marshal(c.Egress)
	if err != nil {
		return fmt.Errorf("create computer: %w", err)
	}
	var authority []byte
	if c.Authority != nil {
		if authority, err = json.Marshal(c.Authority); err != nil {
			return fmt.Errorf("create computer: %w", err)
		}
	}
	created := fillTime(c.CreatedAt)
	err = s.withTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM tenants WHERE id = ?`), c.TenantID).Scan(&n); err != nil {
			return err
		} else if n == 0 {
			return bothy.Errorf(bothy.ENOTFOUND, "tenant %q not found", c.TenantID)
		}
		if err := s.claimConversation(ctx, tx, c, created); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO computers (`+computerColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
			c.TenantID, c.ID, c.Owner, c.ConversationID, c.Label, c.Profile, state, c.Generation, c.Revision, c.RootDigest,
			s.timeArg(created), s.timeArg(created), c.WorkJobID, string(egress), string(authority))
		return s.conflict(err, "computer %q already exists", c.ID)
	})
	if err != nil {
		return fmt.Errorf("create computer: %w", err)
	}
	c.State, c.CreatedAt, c.UpdatedAt = state, created, created
	return nil
}

// claimConversation makes c's owner the owner of its conversation if the
// conversation is new, and refuses c if the conversation is another
// owner's. The primary key decides between concurrent first computers.
func (s *DB) claimConversation(ctx context.Context, tx *sql.Tx, c *bothy.Computer, at time.Time) error {
	if c.ConversationID == "" {
		return nil
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO conversations (tenant_id, id, owner, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT DO NOTHING`), c.TenantID, c.ConversationID, c.Owner, s.timeArg(at)); err != nil {
		return err
	}
	var owner string
	if err := tx.QueryRowContext(ctx, s.q(`SELECT owner FROM conversations WHERE tenant_id = ? AND id = ?`),
		c.TenantID, c.ConversationID).Scan(&owner); err != nil {
		return err
	} else if owner != c.Owner {
		return bothy.Errorf(bothy.ENOTFOUND, "conversation %q is another owner's", c.ConversationID)
	}
	return nil
}

// ConversationOwner returns the owner of a conversation, or ENOTFOUND.
func (s *DB) ConversationOwner(ctx context.Context, tenantID, conversationID string) (string, error) {
	var owner string
	err := s.db.QueryRowContext(ctx, s.q(`SELECT owner FROM conversations WHERE tenant_id = ? AND id = ?`),
		tenantID, conversationID).Scan(&owner)
	if err != nil {
		return "", fmt.Errorf("conversation owner: %w", notFound(err, "conversation %q not found", conversationID))
	}
	return owner, nil
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

func scanComputer(r scanner) (*bothy.Computer, error) {
	c := &bothy.Computer{}
	var egress, authority string
	u := &c.Usage
	err := r.Scan(&c.TenantID, &c.ID, &c.Owner, &c.ConversationID, &c.Label, &c.Profile, &c.State,
		&c.Generation, &c.Revision, &c.RootDigest, scanTime(&c.CreatedAt), scanTime(&c.UpdatedAt), &c.WorkJobID,
		&egress, &authority, &u.CPUMicros, &u.PeakMemoryBytes, &u.MemoryByteSeconds, &u.BytesWritten, &u.NetworkBytes, &u.WallMillis)
	if err != nil {
		return nil, err
	}
	if egress != "" {
		if err := json.Unmarshal([]byte(egress), &c.Egress); err != nil {
			return nil, fmt.Errorf("computer %q egress: %w", c.ID, err)
		}
	}
	c.Egress.Normalize()
	if authority != "" {
		c.Authority = new(bothy.Authority)
		if err := json.Unmarshal([]byte(authority), c.Authority); err != nil {
			return nil, fmt.Errorf("computer %q authority: %w", c.ID, err)
		}
	}
	return c, nil
}

// FindComputer returns the computer, or ENOTFOUND.
func (s *DB) FindComputer(ctx context.Context, tenantID, id string) (*bothy.Computer, error) {
	c, err := s.findComputer(ctx, s.db, tenantID, id)
	if err != nil {
		return nil, fmt.Errorf("find computer: %w", err)
	}
	return c, nil
}

// queryer is a *sql.DB or *sql.Tx.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *DB) findComputer(ctx context.Context, q queryer, tenantID, id string) (*bothy.Computer, error) {
	row := q.QueryRowContext(ctx, s.q(computerSelect+` WHERE tenant_id = ? AND id = ?`), tenantID, id)
	c, err := scanComputer(row)
	return c, notFound(err, "computer %q not found", id)
}

// ListComputers returns the tenant's computers that match f, ordered by
// creation time, then ID. Limit 0 means DefaultLimit; limits above MaxLimit
// are capped.
func (s *DB) ListComputers(ctx context.Context, tenantID string, f bothy.ComputerFilter) ([]*bothy.Computer, error) {
	offset, limit, err := page(f.Offset, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list computers: %w", err)
	}
	where, args := []string{"tenant_id = ?"}, []any{tenantID}
	if f.Owner != "" {
		where, args = append(where, "owner = ?"), append(args, f.Owner)
	}
	if f.ConversationID != "" {
		where, args = append(where, "conversation_id = ?"), append(args, f.ConversationID)
	}
	if f.Label != "" {
		where, args = append(where, "label = ?"), append(args, f.Label)
	}
	if f.State != "" {
		where, args = append(where, "state = ?"), append(args, f.State)
	}
	args = append(args, limit, offset)
	rows, err := s.db.QueryContext(ctx, s.q(computerSelect+` WHERE `+
		strings.Join(where, " AND ")+` ORDER BY created_at, id LIMIT ? OFFSET ?`), args...)
	if err != nil {
		return nil, fmt.Errorf("list computers: %w", err)
	}
	defer rows.Close()
	cs := []*bothy.Computer{}
	for rows.Next() {
		c, err := scanComputer(rows)
		if err != nil {
			return nil, fmt.Errorf("list computers: %w", err)
		}
		cs = append(cs, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list computers: %w", err)
	}
	return cs, nil
}

// SetComputerState sets the state and UpdatedAt, or returns ENOTFOUND.
func (s *DB) SetComputerState(ctx context.Context, tenantID, id, state string) error {
	if !bothy.ValidState(state) {
		return fmt.Errorf("set computer state: %w", bothy.Errorf(bothy.EINVALID, "unknown computer state %q", state))
	}
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE computers SET state = ?, updated_at = ? WHERE tenant_id = ? AND id = ?`),
		state, s.timeArg(now()), tenantID, id)
	if err != nil {
		return fmt.Errorf("set computer state: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("set computer state: %w", err)
	} else if n == 0 {
		return fmt.Errorf("set computer state: %w", bothy.Errorf(bothy.ENOTFOUND, "computer %q not found", id))
	}
	return nil
}

// AddComputerUsage adds u to the computer's usage totals. See
// bothy.ComputerService.
func (s *DB) AddComputerUsage(ctx context.Context, tenantID, id string, u bothy.Usage) error {
	n, err := s.addUsage(ctx, s.db, tenantID, id, u)
	if err != nil {
		return fmt.Errorf("add computer usage: %w", err)
	} else if n == 0 {
		return fmt.Errorf("add computer usage: %w", bothy.Errorf(bothy.ENOTFOUND, "computer %q not found", id))
	}
	return nil
}

// execer is a *sql.DB or *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// addUsage adds u to a computer's running totals (the peak is the larger)
// and returns how many rows it changed.
func (s *DB) addUsage(ctx context.Context, e execer, tenantID, id string, u bothy.Usage) (int64, error) {
	res, err := e.ExecContext(ctx, s.q(`UPDATE computers SET used_cpu_us = used_cpu_us + ?,
		used_peak_memory_bytes = CASE WHEN used_peak_memory_bytes < ? THEN ? ELSE used_peak_memory_bytes END,
		used_memory_byte_seconds = used_memory_byte_seconds + ?, used_bytes_written = used_bytes_written + ?,
		used_network_bytes = used_network_bytes + ?, used_wall_millis = used_wall_millis + ?
		WHERE tenant_id = ? AND id = ?`), u.CPUMicros, u.PeakMemoryBytes, u.PeakMemoryBytes, u.MemoryByteSeconds,
		u.BytesWritten, u.NetworkBytes, u.WallMillis, tenantID, id)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

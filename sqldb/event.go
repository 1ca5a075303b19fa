package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/bothyhq/bothy"
)

// checkBatch validates events and reports whether AppendEvents assigns their
// seqs (every Seq is 0) or verifies them (contiguous and positive).
func checkBatch(events []bothy.Event) (assign bool, err error) {
	if len(events) > bothy.MaxEventsAppend {
		return false, bothy.Errorf(bothy.ETOOLARGE, "at most %d events per append", bothy.MaxEventsAppend)
	}
	assign = events[0].Seq == 0
	for i := range events {
		e := &events[i]
		if err := e.Validate(); err != nil {
			return false, err
		}
		if assign && e.Seq != 0 || !assign && e.Seq != events[0].Seq+int64(i) {
			return false, bothy.Errorf(bothy.EINVALID, "event seqs in one append must be all 0 or contiguous")
		}
	}
	return assign, nil
}

// AppendEvents stores a contiguous batch of events and advances the
// command's last_seq, in one transaction. See bothy.EventService.
//
// Appenders of one command run one at a time: the transaction locks the
// command row (a no-op UPDATE … RETURNING last_seq, which on PostgreSQL
// waits for a concurrent appender and then reads its committed last_seq),
// after the lease lock that fences a runtime, in the same order as
// TransitionCommand, so the two cannot deadlock.
func (s *DB) AppendEvents(ctx context.Context, tenantID, commandID string, generation int64, events []bothy.Event) error {
	if len(events) == 0 {
		return nil
	} else if generation < 0 {
		return fmt.Errorf("append events: %w", bothy.Errorf(bothy.EINVALID, "generation must not be negative"))
	}
	assign, err := checkBatch(events)
	if err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	var stored []bothy.Event // what this call stored, for writing back into events
	err = s.withTx(ctx, func(tx *sql.Tx) error {
		stored = nil
		cur, err := s.findCommand(ctx, tx, tenantID, commandID)
		if err != nil {
			return err
		}
		lock := `UPDATE commands SET last_seq = last_seq WHERE tenant_id = ? AND id = ?`
		args := []any{tenantID, commandID}
		if generation != 0 {
			if cur.Generation != generation || cur.LeaseID == "" {
				return staleGeneration(cur, generation)
			}
			if _, err := s.lockLease(ctx, tx, tenantID, cur.LeaseID, generation); err != nil {
				return err
			}
			lock, args = lock+` AND generation = ?`, append(args, generation)
		}
		var last int64
		var state string
		err = tx.QueryRowContext(ctx, s.q(lock+` RETURNING last_seq, state`), args...).Scan(&last, &state)
		if errors.Is(err, sql.ErrNoRows) {
			if cur, err = s.findCommand(ctx, tx, tenantID, commandID); err != nil {
				return err
			}
			return staleGeneration(cur, generation)
		} else if err != nil {
			return err
		}

		batch := make([]bothy.Event, len(events))
		copy(batch, events)
		if assign {
			for i := range batch {
				batch[i].Seq = last + 1 + int64(i)
			}
		}
		first, end := batch[0].Seq, batch[len(batch)-1].Seq
		if first > last+1 {
			return bothy.Errorf(bothy.EINVALID, "event seq %d leaves a gap after %d", first, last)
		}
		if first <= last {
			if err := s.checkResent(ctx, tx, tenantID, commandID, batch[:min(last, end)-first+1]); err != nil {
				return err
			}
		}
		fresh := batch[min(int64(len(batch)), max(0, last+1-first)):]
		if len(fresh) == 0 {
			return nil
		}
		if generation != 0 && bothy.CommandTerminal(state) {
			return bothy.Errorf(bothy.ECONFLICT, "command %q is %s and takes no new events", commandID, state)
		}
		truncated := false
		for i := range fresh {
			e := &fresh[i]
			e.TenantID, e.CommandID, e.CreatedAt = tenantID, commandID, fillTime(e.CreatedAt)
			if e.Data == nil {
				e.Data = []byte{}
			}
			truncated = truncated || e.Kind == bothy.EventTruncated
			_, err := tx.ExecContext(ctx, s.q(`INSERT INTO events (tenant_id, command_id, seq, kind, data, fields, created_at)
				VALUES (?, ?, ?, ?, ?, ?, ?)`), tenantID, commandID, e.Seq, e.Kind, e.Data, e.Fields, s.timeArg(e.CreatedAt))
			if err != nil {
				return err
			}
		}
		set, args := `last_seq = ?, updated_at = ?`, []any{end, s.timeArg(now())}
		if truncated {
			set, args = set+`, truncated = ?`, append(args, true)
		}
		_, err = tx.ExecContext(ctx, s.q(`UPDATE commands SET `+set+` WHERE tenant_id = ? AND id = ?`), append(args, tenantID, commandID)...)
		stored = fresh
		return err
	})
	if err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	// Write back what the store decided: assigned seqs and filled times.
	off := len(events) - len(stored)
	for i, e := range stored {
		events[off+i].TenantID, events[off+i].CommandID = e.TenantID, e.CommandID
		events[off+i].Seq, events[off+i].CreatedAt = e.Seq, e.CreatedAt
	}
	return nil
}

// checkResent compares re-sent events, whose seqs are already stored, with
// what is stored: the same content is a no-op, different content ECONFLICT.
func (s *DB) checkResent(ctx context.Context, tx *sql.Tx, tenantID, commandID string, resent []bothy.Event) error {
	first, end := resent[0].Seq, resent[len(resent)-1].Seq
	have, err := s.listEvents(ctx, tx, tenantID, commandID, first-1, end, len(resent))
	if err != nil {
		return err
	} else if len(have) != len(resent) {
		return fmt.Errorf("events %d to %d of command %q: found %d", first, end, commandID, len(have))
	}
	for i, h := range have {
		if !h.SameContent(&resent[i]) {
			return bothy.Errorf(bothy.ECONFLICT, "event %d of command %q is already stored with other content", h.Seq, commandID)
		}
	}
	return nil
}

// ListEvents returns the command's events after afterSeq, in seq order.
func (s *DB) ListEvents(ctx context.Context, tenantID, commandID string, afterSeq int64, limit int) ([]*bothy.Event, error) {
	_, limit, err := page(0, limit)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	} else if afterSeq < 0 {
		return nil, fmt.Errorf("list events: %w", bothy.Errorf(bothy.EINVALID, "after seq must not be negative"))
	}
	out, err := s.listEvents(ctx, s.db, tenantID, commandID, afterSeq, 0, limit)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	evs := make([]*bothy.Event, len(out))
	for i := range out {
		evs[i] = &out[i]
	}
	return evs, nil
}

// rowsQueryer is a *sql.DB or *sql.Tx.
type rowsQueryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// listEvents returns up to limit events with afterSeq < seq, and seq <= end
// unless end is 0.
func (s *DB) listEvents(ctx context.Context, q rowsQueryer, tenantID, commandID string, afterSeq, end int64, limit int) ([]bothy.Event, error) {
	query, args := `SELECT tenant_id, command_id, seq, kind, data, fields, created_at FROM events
		WHERE tenant_id = ? AND command_id = ? AND seq > ?`, []any{tenantID, commandID, afterSeq}
	if end > 0 {
		query, args = query+` AND seq <= ?`, append(args, end)
	}
	rows, err := q.QueryContext(ctx, s.q(query+` ORDER BY seq LIMIT ?`), append(args, limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	evs := []bothy.Event{}
	for rows.Next() {
		var e bothy.Event
		if err := rows.Scan(&e.TenantID, &e.CommandID, &e.Seq, &e.Kind, &e.Data, &e.Fields, scanTime(&e.CreatedAt)); err != nil {
			return nil, err
		}
		evs = append(evs, e)
	}
	return evs, rows.Err()
}

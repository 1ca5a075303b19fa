package sqldb

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/bothyhq/bothy"
)

// commandColumns is the column list that scanCommand reads. DurationMS is
// stored as wall_millis.
const commandColumns = `tenant_id, id, computer_id, idempotency_key, argv, script, cwd, env_names, timeout_ms, state,
	exit_code, signal, lease_id, generation, last_seq, output_digest, truncated, created_at, dispatched_at, started_at,
	finished_at, wall_millis, revision_after, work_job_id, revision_before, authority_digest, cpu_us, peak_memory_bytes,
	memory_byte_seconds, bytes_written, network_bytes, limited, secrets, limits, error, stdin_bytes`

func scanCommand(r scanner) (*bothy.Command, error) {
	c := &bothy.Command{}
	var key, leaseID sql.NullString
	var exit, gen sql.NullInt64
	var argv, env, limited, secrets, limits string
	u := &c.Usage
	err := r.Scan(&c.TenantID, &c.ID, &c.ComputerID, &key, &argv, &c.Script, &c.Cwd, &env, &c.TimeoutMS, &c.State,
		&exit, &c.Signal, &leaseID, &gen, &c.LastSeq, &c.OutputDigest, &c.Truncated, scanTime(&c.CreatedAt),
		scanTime(&c.DispatchedAt), scanTime(&c.StartedAt), scanTime(&c.FinishedAt), &c.DurationMS, &c.RevisionAfter,
		&c.WorkJobID, &c.RevisionBefore, &c.AuthorityDigest, &u.CPUMicros, &u.PeakMemoryBytes, &u.MemoryByteSeconds,
		&u.BytesWritten, &u.NetworkBytes, &limited, &secrets, &limits, &c.Error, &c.StdinBytes)
	if err != nil {
		return nil, err
	}
	u.WallMillis = c.DurationMS
	if limits != "" {
		if err := json.Unmarshal([]byte(limits), &c.Limits); err != nil {
			return nil, fmt.Errorf("command %q limits: %w", c.ID, err)
		}
	}
	if secrets != "" {
		if err := json.Unmarshal([]byte(secrets), &c.Secrets); err != nil {
			return nil, fmt.Errorf("command %q secrets: %w", c.ID, err)
		}
	}
	for l := range strings.SplitSeq(limited, ",") {
		switch l {
		case "oom_killed":
			c.OOMKilled = true
		case "pids_limited":
			c.PidsLimited = true
		case "disk_limited":
			c.DiskLimited = true
		case "disk_full":
			c.DiskFull = true
		case "sandbox_lost":
			c.SandboxLost = true
		}
	}
	c.IdempotencyKey, c.LeaseID, c.Generation = key.String, leaseID.String, gen.Int64
	if exit.Valid {
		code := int(exit.Int64)
		c.ExitCode = &code
	}
	if c.Argv, err = decodeList(argv); err != nil {
		return nil, fmt.Errorf("command %q argv: %w", c.ID, err)
	}
	if c.EnvNames, err = decodeList(env); err != nil {
		return nil, fmt.Errorf("command %q env names: %w", c.ID, err)
	}
	return c, nil
}

// encodeList stores a list of strings as a JSON array, and an empty list as "".
func encodeList(list []string) (string, error) {
	if len(list) == 0 {
		return "", nil
	}
	b, err := json.Marshal(list)
	return string(b), err
}

// decodeList reads what encodeList stored; "" is nil.
func decodeList(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var list []string
	err := json.Unmarshal([]byte(s), &list)
	return list, err
}

// nilIfEmpty returns list, or nil if it is empty, as decodeList reads it back.
func nilIfEmpty(list []string) []string {
	if len(list) == 0 {
		return nil
	}
	return list
}

// nullString is NULL for "".
func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// CreateCommand stores c as admitted, or returns the computer's command with
// the same idempotency key. See bothy.CommandService.
//
// The insert is INSERT … ON CONFLICT (tenant_id, computer_id,
// idempotency_key) DO NOTHING, so concurrent callers with one key never
// fail: on PostgreSQL the loser waits for the winner's commit, inserts
// nothing, and its next statement (a new READ COMMITTED snapshot) reads the
// winner's row; SQLite runs writers one at a time. A NULL key never
// conflicts.
func (s *DB) CreateCommand(ctx context.Context, c *bothy.Command) (bool, error) {
	if err := c.Validate(); err != nil {
		return false, fmt.Errorf("create command: %w", err)
	} else if c.State != "" && c.State != bothy.CommandAdmitted {
		return false, fmt.Errorf("create command: %w", bothy.Errorf(bothy.EINVALID, "a new command must be admitted, not %q", c.State))
	}
	argv, err := encodeList(c.Argv)
	if err != nil {
		return false, fmt.Errorf("create command: %w", err)
	}
	env, err := encodeList(c.EnvNames)
	if err != nil {
		return false, fmt.Errorf("create command: %w", err)
	}
	var secrets []byte
	if len(c.Secrets) > 0 {
		if secrets, err = json.Marshal(c.Secrets); err != nil {
			return false, fmt.Errorf("create command: %w", err)
		}
	}
	var limits []byte
	if c.Limits != (bothy.Limits{}) {
		if limits, err = json.Marshal(c.Limits); err != nil {
			return false, fmt.Errorf("create command: %w", err)
		}
	}
	created := fillTime(c.CreatedAt)
	var existing *bothy.Command
	err = s.withTx(ctx, func(tx *sql.Tx) error {
		existing = nil
		comp, err := s.findComputer(ctx, tx, c.TenantID, c.ComputerID)
		if err != nil {
			return err
		}
		if c.IdempotencyKey != "" {
			if existing, err = s.commandByKey(ctx, tx, c.TenantID, c.ComputerID, c.IdempotencyKey); err == nil {
				return nil
			} else if bothy.ErrorCode(err) != bothy.ENOTFOUND {
				return err
			}
		}
		if comp.State == bothy.StateDestroyed {
			return bothy.Errorf(bothy.ECONFLICT, "computer %q is destroyed", comp.ID)
		}
		at := s.timeArg(created)
		res, err := tx.ExecContext(ctx, s.q(`INSERT INTO commands
			(tenant_id, id, computer_id, idempotency_key, argv, script, cwd, env_names, timeout_ms, state, created_at, updated_at, work_job_id, authority_digest, secrets, limits, stdin_bytes)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (tenant_id, computer_id, idempotency_key) DO NOTHING`),
			c.TenantID, c.ID, c.ComputerID, nullString(c.IdempotencyKey), argv, c.Script, c.Cwd, env, c.TimeoutMS,
			bothy.CommandAdmitted, at, at, c.WorkJobID, c.AuthorityDigest, string(secrets), string(limits), c.StdinBytes)
		if err != nil {
			return s.conflict(err, "command %q already exists", c.ID)
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		existing, err = s.commandByKey(ctx, tx, c.TenantID, c.ComputerID, c.IdempotencyKey)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("create command: %w", err)
	}
	if existing != nil {
		*c = *existing
		return false, nil
	}
	*c = bothy.Command{
		ID: c.ID, TenantID: c.TenantID, ComputerID: c.ComputerID, IdempotencyKey: c.IdempotencyKey, WorkJobID: c.WorkJobID,
		Argv: nilIfEmpty(c.Argv), Script: c.Script, Cwd: c.Cwd, EnvNames: nilIfEmpty(c.EnvNames), TimeoutMS: c.TimeoutMS,
		State: bothy.CommandAdmitted, CreatedAt: created, AuthorityDigest: c.AuthorityDigest, Secrets: nilIfEmptyRefs(c.Secrets), Limits: c.Limits,
		StdinBytes: c.StdinBytes,
	}
	return true, nil
}

func (s *DB) commandByKey(ctx context.Context, q queryer, tenantID, computerID, key string) (*bothy.Command, error) {
	row := q.QueryRowContext(ctx, s.q(`SELECT `+commandColumns+` FROM commands
		WHERE tenant_id = ? AND computer_id = ? AND idempotency_key = ?`), tenantID, computerID, key)
	c, err := scanCommand(row)
	return c, notFound(err, "no command with idempotency key %q", key)
}

// FindCommand returns the command, or ENOTFOUND.
func (s *DB) FindCommand(ctx context.Context, tenantID, id string) (*bothy.Command, error) {
	c, err := s.findCommand(ctx, s.db, tenantID, id)
	if err != nil {
		return nil, fmt.Errorf("find command: %w", err)
	}
	return c, nil
}

func (s *DB) findCommand(ctx context.Context, q queryer, tenantID, id string) (*bothy.Command, error) {
	row := q.QueryRowContext(ctx, s.q(`SELECT `+commandColumns+` FROM commands WHERE tenant_id = ? AND id = ?`), tenantID, id)
	c, err := scanCommand(row)
	return c, notFound(err, "command %q not found", id)
}

// ListCommands returns the tenant's commands that match f, ordered by
// creation time, then ID.
func (s *DB) ListCommands(ctx context.Context, tenantID string, f bothy.CommandFilter) ([]*bothy.Command, error) {
	offset, limit, err := page(f.Offset, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	where, args := []string{"tenant_id = ?"}, []any{tenantID}
	if f.ComputerID != "" {
		where, args = append(where, "computer_id = ?"), append(args, f.ComputerID)
	}
	if f.State != "" {
		where, args = append(where, "state = ?"), append(args, f.State)
	}
	if f.LeaseID != "" {
		where, args = append(where, "lease_id = ?"), append(args, f.LeaseID)
	}
	args = append(args, limit, offset)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+commandColumns+` FROM commands WHERE `+
		strings.Join(where, " AND ")+` ORDER BY created_at, id LIMIT ? OFFSET ?`), args...)
	if err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	defer rows.Close()
	cs := []*bothy.Command{}
	for rows.Next() {
		c, err := scanCommand(rows)
		if err != nil {
			return nil, fmt.Errorf("list commands: %w", err)
		}
		cs = append(cs, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	return cs, nil
}

// DispatchCommand moves the command from admitted to dispatched, at most
// once, after locking the lease it is sent to (see lockLease). The state
// compare-and-swap is one conditional UPDATE, re-evaluated by PostgreSQL
// after waiting for a concurrent dispatcher's row lock, so exactly one
// dispatcher matches the admitted row.
func (s *DB) DispatchCommand(ctx context.Context, tenantID, id, leaseID string, generation int64) (*bothy.Command, error) {
	var out *bothy.Command
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		cur, err := s.findCommand(ctx, tx, tenantID, id)
		if err != nil {
			return err
		}
		computerID, err := s.lockLease(ctx, tx, tenantID, leaseID, generation)
		if err != nil {
			return err
		} else if computerID != cur.ComputerID {
			return bothy.Errorf(bothy.ECONFLICT, "lease %q is not of computer %q", leaseID, cur.ComputerID)
		}
		comp, err := s.findComputer(ctx, tx, tenantID, cur.ComputerID)
		if err != nil {
			return err
		}
		at := s.timeArg(now())
		res, err := tx.ExecContext(ctx, s.q(`UPDATE commands SET state = ?, lease_id = ?, generation = ?, dispatched_at = ?, updated_at = ?,
			revision_before = ? WHERE tenant_id = ? AND id = ? AND state = ?`),
			bothy.CommandDispatched, leaseID, generation, at, at, comp.Revision, tenantID, id, bothy.CommandAdmitted)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			if cur, err = s.findCommand(ctx, tx, tenantID, id); err != nil {
				return err
			}
			return bothy.Errorf(bothy.ECONFLICT, "command %q is %s, not admitted; it is dispatched at most once", id, cur.State)
		}
		out, err = s.findCommand(ctx, tx, tenantID, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dispatch command: %w", err)
	}
	return out, nil
}

// validTransition checks from → to against the domain's table.
func validTransition(from []string, to string, u bothy.CommandUpdate) error {
	if len(from) == 0 {
		return bothy.Errorf(bothy.EINVALID, "a transition needs at least one state to move from")
	} else if !bothy.ValidCommandState(to) {
		return bothy.Errorf(bothy.EINVALID, "unknown command state %q", to)
	} else if u.Generation < 0 {
		return bothy.Errorf(bothy.EINVALID, "generation must not be negative")
	}
	for _, f := range from {
		if !bothy.CanTransition(f, to) {
			return bothy.Errorf(bothy.EINVALID, "a command may not move from %q to %q", f, to)
		} else if bothy.RuntimeOnly(f, to) && u.Generation == 0 {
			return bothy.Errorf(bothy.EINVALID, "only a runtime's report, with its generation, moves a command from %q to %q", f, to)
		}
	}
	return nil
}

// TransitionCommand moves the command from one of the states from to to, by
// compare-and-swap, and sets u's fields. With u.Generation it first checks
// the command's generation and locks its lease (see lockLease), and the
// UPDATE repeats the generation check, so a stale runtime never writes.
func (s *DB) TransitionCommand(ctx context.Context, tenantID, id string, from []string, to string, u bothy.CommandUpdate) (*bothy.Command, error) {
	if err := validTransition(from, to, u); err != nil {
		return nil, fmt.Errorf("transition command: %w", err)
	}
	from = slices.Compact(slices.Sorted(slices.Values(from)))
	var out *bothy.Command
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		cur, err := s.findCommand(ctx, tx, tenantID, id)
		if err != nil {
			return err
		} else if err := s.fenceGeneration(ctx, tx, cur, u.Generation); err != nil {
			return err
		} else if err := s.swapCommandState(ctx, tx, cur, from, to, u); err != nil {
			return err
		} else if err := s.addEndUsage(ctx, tx, cur, to, u); err != nil {
			return err
		}
		out, err = s.findCommand(ctx, tx, tenantID, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("transition command: %w", err)
	}
	return out, nil
}

// fenceGeneration checks, for a runtime's write (generation non-zero), that
// the command is dispatched at that generation, and locks its lease, which
// must still be unreleased at it (see lockLease).
func (s *DB) fenceGeneration(ctx context.Context, tx *sql.Tx, cur *bothy.Command, generation int64) error {
	if generation == 0 {
		return nil
	} else if cur.Generation != generation || cur.LeaseID == "" {
		return staleGeneration(cur, generation)
	}
	_, err := s.lockLease(ctx, tx, cur.TenantID, cur.LeaseID, generation)
	return err
}

// swapCommandState moves the command cur from one of the states from to
// to, setting u's fields, by one conditional UPDATE that repeats the
// generation check; a command in none of the states from, or of another
// generation by now, is ECONFLICT.
func (s *DB) swapCommandState(ctx context.Context, tx *sql.Tx, cur *bothy.Command, from []string, to string, u bothy.CommandUpdate) error {
	set, args := s.transitionSet(to, u)
	where := "tenant_id = ? AND id = ? AND state IN (?" + strings.Repeat(", ?", len(from)-1) + ")"
	args = append(args, cur.TenantID, cur.ID)
	for _, f := range from {
		args = append(args, f)
	}
	if u.Generation != 0 {
		where, args = where+" AND generation = ?", append(args, u.Generation)
	}
	res, err := tx.ExecContext(ctx, s.q(`UPDATE commands SET `+strings.Join(set, ", ")+` WHERE `+where), args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	again, err := s.findCommand(ctx, tx, cur.TenantID, cur.ID)
	if err != nil {
		return err
	} else if u.Generation != 0 && again.Generation != u.Generation {
		return staleGeneration(again, u.Generation)
	}
	return bothy.Errorf(bothy.ECONFLICT, "command %q is %s, not %s", cur.ID, again.State, strings.Join(from, " or "))
}

// transitionSet returns the SET clause of a move to the state to with u's
// fields, and its arguments: the start and finish times on entering
// running and a terminal state, and a dispatch forgotten on going back to
// admitted.
func (s *DB) transitionSet(to string, u bothy.CommandUpdate) ([]string, []any) {
	at := now()
	set, args := []string{"state = ?", "updated_at = ?"}, []any{to, s.timeArg(at)}
	if u.ExitCode != nil {
		set, args = append(set, "exit_code = ?"), append(args, *u.ExitCode)
	}
	if u.Signal != "" {
		set, args = append(set, "signal = ?"), append(args, u.Signal)
	}
	if u.OutputDigest != "" {
		set, args = append(set, "output_digest = ?"), append(args, u.OutputDigest)
	}
	if u.DurationMS != 0 {
		set, args = append(set, "wall_millis = ?"), append(args, u.DurationMS)
	}
	if u.RevisionAfter != 0 {
		set, args = append(set, "revision_after = ?"), append(args, u.RevisionAfter)
	}
	if us := u.Usage; us != nil {
		set = append(set, "cpu_us = ?", "peak_memory_bytes = ?", "memory_byte_seconds = ?", "bytes_written = ?", "network_bytes = ?")
		args = append(args, us.CPUMicros, us.PeakMemoryBytes, us.MemoryByteSeconds, us.BytesWritten, us.NetworkBytes)
	}
	if u.Error != "" {
		set, args = append(set, "error = ?"), append(args, cutError(u.Error))
	}
	if limited := limitedList(u); limited != "" {
		set, args = append(set, "limited = ?"), append(args, limited)
	}
	switch {
	case to == bothy.CommandRunning:
		started := u.StartedAt
		if started.IsZero() {
			started = at
		}
		set, args = append(set, "started_at = COALESCE(started_at, ?)"), append(args, s.timeArg(started))
	case bothy.CommandTerminal(to):
		finished := u.FinishedAt
		if finished.IsZero() {
			finished = at
		}
		set, args = append(set, "finished_at = ?"), append(args, s.timeArg(finished))
		if !u.StartedAt.IsZero() {
			set, args = append(set, "started_at = COALESCE(started_at, ?)"), append(args, s.timeArg(u.StartedAt))
		}
	case to == bothy.CommandAdmitted:
		// The runtime never saw it: forget the dispatch, so that it may
		// be dispatched once more.
		set = append(set, "lease_id = NULL", "generation = NULL", "dispatched_at = NULL")
	}
	return set, args
}

// addEndUsage adds what the command used to its computer's running total
// of its commands' usage. A command reaches a terminal state once, so it
// adds once.
func (s *DB) addEndUsage(ctx context.Context, tx *sql.Tx, cur *bothy.Command, to string, u bothy.CommandUpdate) error {
	if u.Usage == nil && (u.DurationMS == 0 || !bothy.CommandTerminal(to)) {
		return nil
	}
	var us bothy.Usage
	if u.Usage != nil {
		us = *u.Usage
	}
	us.WallMillis = u.DurationMS
	_, err := s.addUsage(ctx, tx, cur.TenantID, cur.ComputerID, us)
	return err
}

// staleGeneration is the ECONFLICT of a runtime write for a command that is
// not (or no longer) dispatched at its generation.
func staleGeneration(c *bothy.Command, generation int64) error {
	if c.LeaseID == "" {
		return bothy.Errorf(bothy.ECONFLICT, "command %q is not dispatched, so generation %d may not write it", c.ID, generation)
	}
	return bothy.Errorf(bothy.ECONFLICT, "command %q is of generation %d, not %d", c.ID, c.Generation, generation)
}

// limitedList is the limited column for u's limit flags and SandboxLost.
func limitedList(u bothy.CommandUpdate) string {
	var l []string
	if u.OOMKilled {
		l = append(l, "oom_killed")
	}
	if u.PidsLimited {
		l = append(l, "pids_limited")
	}
	if u.DiskLimited {
		l = append(l, "disk_limited")
	}
	if u.DiskFull {
		l = append(l, "disk_full")
	}
	if u.SandboxLost {
		// Not a limit, but a flag of the end like them.
		l = append(l, "sandbox_lost")
	}
	return strings.Join(l, ",")
}

// cutError cuts a command's error to bothy.MaxCommandErrorLen bytes, at a
// rune boundary.
func cutError(s string) string {
	if len(s) <= bothy.MaxCommandErrorLen {
		return s
	}
	s = s[:bothy.MaxCommandErrorLen]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

func nilIfEmptyRefs(refs []bothy.SecretRef) []bothy.SecretRef {
	if len(refs) == 0 {
		return nil
	}
	return refs
}

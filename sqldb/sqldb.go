// Package sqldb implements bothy.Store once, over database/sql, for every SQL
// engine bothy supports. Queries are written with '?' placeholders; a Dialect
// supplies what differs between engines: the migrations, the placeholder
// style, the time encoding and the classification of driver errors. Packages
// sqlite and postgres are thin wrappers that open a *sql.DB and a Dialect.
package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/bothyhq/bothy"
)

// Dialect holds what differs between SQL engines.
type Dialect struct {
	// Name names the engine in errors, such as "sqlite" or "postgres".
	Name string
	// Migrations holds the schema as *.sql files at its root, applied once
	// each in name order, each in its own transaction.
	Migrations fs.FS
	// MigrationLock, if set, is executed first in each migration transaction
	// so that concurrent processes migrate one at a time (for example
	// "SELECT pg_advisory_xact_lock(...)").
	MigrationLock string
	// Rebind rewrites a query written with '?' placeholders for the engine;
	// nil leaves it as is. See RebindDollar.
	Rebind func(query string) string
	// TextTime stores times as fixed-width UTC text (TimeLayout), for engines
	// without a time type; otherwise times are passed as time.Time.
	TextTime bool
	// IsUniqueViolation reports whether err is a primary key or unique
	// constraint violation; the store returns such errors as ECONFLICT.
	IsUniqueViolation func(err error) bool
	// IsRetryable reports whether err means the transaction lost a race for
	// a lock (SQLite busy, PostgreSQL serialization failure or deadlock) and
	// may be run again from the start. Nil means never.
	IsRetryable func(err error) bool
	// IsUnavailable reports whether err means the database cannot be
	// reached (the server is down, refuses connections or dropped the
	// connection); the store returns such errors as EUNAVAILABLE. Nil
	// means never.
	IsUnavailable func(err error) bool
	// IsFull reports whether err means the database's disk is full; the
	// store returns such errors as EINSUFFICIENT. Nil means never.
	IsFull func(err error) bool
}

// TimeLayout is the text form of stored times when Dialect.TextTime is set:
// RFC 3339 in UTC with a fixed six fractional digits, so that text order is
// time order.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

// DB is a bothy.Store over a *sql.DB.
type DB struct {
	db      classifyingDB
	dialect Dialect
}

// classifyingDB is a *sql.DB whose errors pass through DB.classify, so
// that every query of the store reports an unreachable or full database
// as such. QueryRowContext is not covered (its error comes from Scan);
// callers classify that error themselves.
type classifyingDB struct {
	*sql.DB
	s *DB
}

func (d classifyingDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	rows, err := d.DB.QueryContext(ctx, query, args...)
	return rows, d.s.classify(err)
}

func (d classifyingDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := d.DB.ExecContext(ctx, query, args...)
	return res, d.s.classify(err)
}

var _ bothy.Store = (*DB)(nil)

// Open applies d's pending migrations to db and returns the store. The store
// owns db: Close closes it.
func Open(ctx context.Context, db *sql.DB, d Dialect) (*DB, error) {
	s := &DB{dialect: d}
	s.db = classifyingDB{DB: db, s: s}
	if err := s.migrate(ctx); err != nil {
		return nil, fmt.Errorf("open %s store: %w", d.Name, err)
	}
	return s, nil
}

// Close closes the database.
func (s *DB) Close() error { return s.db.Close() }

// SQL returns the underlying database, for tests and diagnostics.
func (s *DB) SQL() *sql.DB { return s.db.DB }

// Ping checks that the database can be reached: nil, or EUNAVAILABLE (or
// another error) if it cannot.
func (s *DB) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping %s: %w", s.dialect.Name, s.classify(err))
	}
	return nil
}

// Messages of classified driver errors, for callers (the driver's error
// stays in the chain, for the log).
var (
	errUnavailable = bothy.Errorf(bothy.EUNAVAILABLE, "the metadata store cannot be reached; try again")
	errFull        = bothy.Errorf(bothy.EINSUFFICIENT, "the metadata store's disk is full")
)

// classify returns err as EUNAVAILABLE or EINSUFFICIENT, with err still in
// its chain, if the dialect calls it so; other errors, and errors that
// already carry a code, are returned unchanged.
func (s *DB) classify(err error) error {
	var be *bothy.Error
	switch {
	case err == nil || errors.As(err, &be):
		return err
	case s.dialect.IsUnavailable != nil && s.dialect.IsUnavailable(err):
		return fmt.Errorf("%w: %w", errUnavailable, err)
	case s.dialect.IsFull != nil && s.dialect.IsFull(err):
		return fmt.Errorf("%w: %w", errFull, err)
	}
	return err
}

// q returns query, written with '?' placeholders, in the dialect's form.
func (s *DB) q(query string) string {
	if s.dialect.Rebind != nil {
		return s.dialect.Rebind(query)
	}
	return query
}

// maxAttempts bounds the retries of a transaction that lost a lock race.
const maxAttempts = 5

// withTx runs fn in a transaction and commits it, running it again if the
// dialect calls the error retryable. fn must not keep state across attempts.
func (s *DB) withTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = s.tryTx(ctx, fn)
		if err == nil || attempt == maxAttempts || s.dialect.IsRetryable == nil || !s.dialect.IsRetryable(err) {
			return s.classify(err)
		}
		select {
		case <-ctx.Done():
			return s.classify(err)
		case <-time.After(time.Duration(attempt*attempt) * 5 * time.Millisecond):
		}
	}
}

func (s *DB) tryTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// conflict maps a unique violation to ECONFLICT with msg, and returns other
// errors unchanged.
func (s *DB) conflict(err error, format string, args ...any) error {
	if err != nil && s.dialect.IsUniqueViolation != nil && s.dialect.IsUniqueViolation(err) {
		return bothy.Errorf(bothy.ECONFLICT, format, args...)
	}
	return err
}

// now returns the store's notion of the current time, at the microsecond
// precision every engine keeps.
func now() time.Time { return bothy.Now().UTC().Truncate(time.Microsecond) }

// fillTime returns t in UTC at microsecond precision, or now if t is zero.
func fillTime(t time.Time) time.Time {
	if t.IsZero() {
		return now()
	}
	return t.UTC().Truncate(time.Microsecond)
}

// timeArg encodes t as a query argument.
func (s *DB) timeArg(t time.Time) any {
	if s.dialect.TextTime {
		return t.UTC().Format(TimeLayout)
	}
	return t.UTC()
}

// nullTimeArg encodes t as a query argument, or NULL if t is zero.
func (s *DB) nullTimeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return s.timeArg(t)
}

// utcMicro returns t in UTC at microsecond precision, and the zero time as is.
func utcMicro(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Microsecond)
}

// timeScanner scans a stored time, as time.Time or as text, into *t (UTC).
type timeScanner struct{ t *time.Time }

// Scan implements sql.Scanner.
func (v timeScanner) Scan(src any) error {
	switch x := src.(type) {
	case time.Time:
		*v.t = x.UTC()
		return nil
	case string:
		return v.parse(x)
	case []byte:
		return v.parse(string(x))
	case nil:
		*v.t = time.Time{}
		return nil
	}
	return fmt.Errorf("scan time: unsupported type %T", src)
}

func (v timeScanner) parse(s string) error {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("scan time: %w", err)
	}
	*v.t = t.UTC()
	return nil
}

// scanTime returns a sql.Scanner that stores a time into *t.
func scanTime(t *time.Time) sql.Scanner { return timeScanner{t} }

// Page limits shared by every list.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// page validates offset and limit and applies the default and the cap.
func page(offset, limit int) (int, int, error) {
	if offset < 0 || limit < 0 {
		return 0, 0, bothy.Errorf(bothy.EINVALID, "offset and limit must not be negative")
	}
	if limit == 0 {
		limit = DefaultLimit
	}
	return offset, min(limit, MaxLimit), nil
}

// notFound returns ENOTFOUND if err is sql.ErrNoRows, else err.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, sql.ErrNoRows) {
		return bothy.Errorf(bothy.ENOTFOUND, format, args...)
	}
	return err
}

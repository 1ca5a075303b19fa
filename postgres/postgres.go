// Package postgres is the metadata store for several replicas: bothy.Store on
// PostgreSQL through pgx. The queries are shared with package sqlite in
// package sqldb; this package supplies the connection pool, the migrations
// and the error classification.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/sqldb"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLockKey is the advisory lock that serializes migrations across
// replicas starting at once ("bothy" in ASCII).
const migrationLockKey = 0x626f746879

// Store is a bothy.Store on a PostgreSQL database.
type Store struct {
	*sqldb.DB
	pool *pgxpool.Pool
}

var _ bothy.Store = (*Store)(nil)

// Open connects to the database named by url (a postgres:// URL or a
// keyword/value string, as pgx accepts) and applies pending migrations.
func Open(ctx context.Context, url string) (*Store, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	dir, err := fs.Sub(migrations, "migrations")
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	s, err := sqldb.Open(ctx, db, sqldb.Dialect{
		Name:              "postgres",
		Migrations:        dir,
		MigrationLock:     fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", migrationLockKey),
		Rebind:            sqldb.RebindDollar,
		IsUniqueViolation: isUniqueViolation,
		IsRetryable:       isRetryable,
		IsUnavailable:     isUnavailable,
		IsFull:            isFull,
	})
	if err != nil {
		db.Close()
		pool.Close()
		return nil, err
	}
	return &Store{DB: s, pool: pool}, nil
}

// Close closes the database handle and the connection pool.
func (s *Store) Close() error {
	err := s.DB.Close()
	s.pool.Close()
	return err
}

// pgCode returns the SQLSTATE of err, or "".
func pgCode(err error) string {
	var e *pgconn.PgError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func isUniqueViolation(err error) bool { return pgCode(err) == "23505" }

// isRetryable reports a serialization failure or a deadlock, after which
// PostgreSQL asks the client to run the transaction again.
func isRetryable(err error) bool {
	c := pgCode(err)
	return c == "40001" || c == "40P01"
}

// isUnavailable reports an error that means the server cannot be reached
// now: a failed connection (refused, timed out, the pool could not dial
// within its deadline: net.Error covers context.DeadlineExceeded), a
// connection the server or the network closed, SQLSTATE class 08
// (connection exception), or 57P01–57P03 (the server is shutting down,
// crashed, or not yet accepting connections).
func isUnavailable(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	c := pgCode(err)
	return strings.HasPrefix(c, "08") || c == "57P01" || c == "57P02" || c == "57P03"
}

// isFull reports disk_full (53100): the server's disk is out of space.
func isFull(err error) bool { return pgCode(err) == "53100" }

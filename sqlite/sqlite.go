// Package sqlite is the embedded metadata store: bothy.Store on a SQLite file
// in WAL mode, through the pure-Go modernc.org/sqlite driver. The queries are
// shared with package postgres in package sqldb.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"syscall"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/sqldb"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a bothy.Store on a SQLite database file.
type Store struct {
	*sqldb.DB
}

var _ bothy.Store = (*Store)(nil)

// Open opens or creates the database file at path and applies pending
// migrations. Every transaction begins IMMEDIATE, so writers take the write
// lock up front and wait for each other (up to the 10 s busy timeout)
// rather than fail on upgrade.
func Open(ctx context.Context, path string) (*Store, error) {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	dir, err := fs.Sub(migrations, "migrations")
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	s, err := sqldb.Open(ctx, db, sqldb.Dialect{
		Name:              "sqlite",
		Migrations:        dir,
		TextTime:          true,
		IsUniqueViolation: isUniqueViolation,
		IsRetryable:       isBusy,
		IsFull:            isFull,
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Store{DB: s}, nil
}

func isUniqueViolation(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

// isBusy reports a lock that busy_timeout did not resolve, such as
// SQLITE_BUSY_SNAPSHOT, which SQLite returns without waiting.
func isBusy(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code()&0xff == sqlite3.SQLITE_BUSY || e.Code()&0xff == sqlite3.SQLITE_LOCKED
}

// isFull reports SQLITE_FULL ("database or disk is full"), or an I/O error
// whose cause is a full disk.
func isFull(err error) bool {
	var e *sqlite.Error
	if errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_FULL {
		return true
	}
	return errors.Is(err, syscall.ENOSPC)
}

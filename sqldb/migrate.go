package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// migrate applies each *.sql file of the dialect's migrations that the
// schema_migrations table does not list, in name order, each in its own
// transaction together with its schema_migrations row. A file once applied
// must never change: add a new file instead.
func (s *DB) migrate(ctx context.Context) error {
	names, err := fs.Glob(s.dialect.Migrations, "*.sql")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	} else if len(names) == 0 {
		return fmt.Errorf("migrate: no migrations")
	}
	sort.Strings(names)
	for _, name := range names {
		if err := s.migrateFile(ctx, name); err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
	}
	return nil
}

// migrateFile applies one migration unless it is recorded as applied. It
// takes the dialect's migration lock before looking, so that of several
// processes starting at once exactly one applies each file.
func (s *DB) migrateFile(ctx context.Context, name string) error {
	body, err := fs.ReadFile(s.dialect.Migrations, name)
	if err != nil {
		return err
	}
	return s.withTx(ctx, func(tx *sql.Tx) error {
		if s.dialect.MigrationLock != "" {
			if _, err := tx.ExecContext(ctx, s.dialect.MigrationLock); err != nil {
				return fmt.Errorf("lock: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			name       TEXT PRIMARY KEY,
			applied_at TEXT NOT NULL
		)`); err != nil {
			return err
		}
		var n int
		err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM schema_migrations WHERE name = ?`), name).Scan(&n)
		if err != nil || n > 0 {
			return err
		}
		if strings.TrimSpace(string(body)) != "" {
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)`),
			name, now().Format(TimeLayout))
		return err
	})
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// CreateDatabase creates the database name on the server of admin, a
// connection string whose role may create databases, sets each of
// settings on it ("synchronous_commit = off"), and returns a connection
// string for it. It is for tests and the bench, which each want a
// database of their own; DropDatabase removes it.
func CreateDatabase(ctx context.Context, admin, name string, settings ...string) (string, error) {
	u, err := withDatabase(admin, name)
	if err != nil {
		return "", err
	}
	stmts := []string{"CREATE DATABASE " + name}
	for _, s := range settings {
		stmts = append(stmts, "ALTER DATABASE "+name+" SET "+s)
	}
	if err := adminExec(ctx, admin, stmts...); err != nil {
		return "", err
	}
	return u, nil
}

// DropDatabase drops the database name on the server of admin, if it
// exists, even if connections to it are still open.
func DropDatabase(ctx context.Context, admin, name string) error {
	return adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
}

// adminExec runs statements one at a time (CREATE DATABASE cannot share a
// transaction) on the database of admin, for at most 30 seconds.
func adminExec(ctx context.Context, admin string, stmts ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to the admin database: %w", err)
	}
	defer conn.Close(ctx)
	for _, stmt := range stmts {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

// withDatabase returns the connection string admin with its database
// replaced by name: a postgres:// URL or a keyword/value string.
func withDatabase(admin, name string) (string, error) {
	if !strings.HasPrefix(admin, "postgres://") && !strings.HasPrefix(admin, "postgresql://") {
		return admin + " dbname=" + name, nil
	}
	u, err := url.Parse(admin)
	if err != nil {
		// url's error repeats the URL, password and all.
		return "", errors.New("the PostgreSQL URL does not parse")
	}
	u.Path, u.RawPath = "/"+name, ""
	q := u.Query()
	if q.Has("dbname") {
		q.Set("dbname", name)
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

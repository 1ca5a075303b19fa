package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/gcs"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/postgres"
	"github.com/bothyhq/bothy/sqlite"
)

// config holds the common flags.
type config struct {
	data, store, blobs, tenant string
}

func (c *config) register(fs *flag.FlagSet) {
	def := os.Getenv("BOTHY_DATA")
	if def == "" {
		if home, err := os.UserHomeDir(); err == nil {
			def = filepath.Join(home, ".local", "share", "bothy")
		} else {
			def = "bothy-data"
		}
	}
	fs.StringVar(&c.data, "data", def, "data directory of the embedded default")
	fs.StringVar(&c.store, "store", "", "metadata store URL: postgres://... (default: SQLite in the data directory)")
	fs.StringVar(&c.blobs, "blobs", "", "blob store: gs://bucket/prefix or a directory (default: DATA/blobs)")
	fs.StringVar(&c.tenant, "tenant", "default", "tenant id")
}

// env is an opened data directory: the stores and the tenant.
type env struct {
	cfg    config
	store  bothy.Store
	blobs  bothy.BlobStore
	tenant *bothy.Tenant
}

func openEnv(ctx context.Context, cfg config) (*env, error) {
	if err := os.MkdirAll(cfg.data, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	var store bothy.Store
	var err error
	if strings.HasPrefix(cfg.store, "postgres://") || strings.HasPrefix(cfg.store, "postgresql://") {
		store, err = postgres.Open(ctx, cfg.store)
	} else if cfg.store == "" {
		store, err = sqlite.Open(ctx, filepath.Join(cfg.data, "bothy.db"))
	} else {
		return nil, bothy.Errorf(bothy.EINVALID, "--store must be a postgres:// URL or empty for SQLite")
	}
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	blobs, err := openBlobs(ctx, cfg)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("open blob store: %w", err)
	}
	e := &env{cfg: cfg, store: store, blobs: blobs}
	if e.tenant, err = e.ensureTenant(ctx, cfg.tenant); err != nil {
		store.Close()
		return nil, err
	}
	return e, nil
}

func (e *env) Close() error { return e.store.Close() }

// ensureTenant finds the tenant or creates it with a new random hash key.
func (e *env) ensureTenant(ctx context.Context, id string) (*bothy.Tenant, error) {
	t, err := e.store.FindTenant(ctx, id)
	if bothy.ErrorCode(err) != bothy.ENOTFOUND {
		return t, err
	}
	if t, err = bothy.NewTenant(id, id); err != nil {
		return nil, err
	}
	if err := e.store.CreateTenant(ctx, t); bothy.ErrorCode(err) == bothy.ECONFLICT {
		return e.store.FindTenant(ctx, id)
	} else if err != nil {
		return nil, err
	}
	return t, nil
}

// computer finds the computer, creating it (cold, standard profile) if create is set.
func (e *env) computer(ctx context.Context, id string, create bool) (*bothy.Computer, error) {
	c, err := e.store.FindComputer(ctx, e.tenant.ID, id)
	if bothy.ErrorCode(err) != bothy.ENOTFOUND || !create {
		return c, err
	}
	c = &bothy.Computer{ID: id, TenantID: e.tenant.ID, Owner: "cli", Profile: "standard", State: bothy.StateCold}
	if err := e.store.CreateComputer(ctx, c); err != nil && bothy.ErrorCode(err) != bothy.ECONFLICT {
		return nil, err
	}
	return e.store.FindComputer(ctx, e.tenant.ID, id)
}

// repo returns the tenant's checkpoint repository.
func (e *env) repo() (*checkpoint.Repo, error) {
	return checkpoint.NewRepo(e.blobs, e.tenant.ID, e.tenant.HashKey)
}

// snapshot opens revision n of the computer (0: the current one).
func (e *env) snapshot(ctx context.Context, c *bothy.Computer, n int64) (*checkpoint.Repo, *checkpoint.Snapshot, error) {
	repo, err := e.repo()
	if err != nil {
		return nil, nil, err
	}
	if n == 0 {
		n = c.Revision
	}
	snap, _, err := repo.OpenRevision(ctx, e.store, c.ID, n)
	return repo, snap, err
}

// statCache is where the stat cache of a computer's checkpoints lives.
func (e *env) statCache(computerID string) string {
	return filepath.Join(e.cfg.data, "cache", e.tenant.ID, computerID+".statcache")
}

// parseFlags parses the common and the command's flags, in any order before the arguments.
func parseFlags(fs *flag.FlagSet, cfg *config, args []string) ([]string, error) {
	cfg.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return fs.Args(), nil
}

// openVerb parses a verb's flags and the common ones, checks the arguments
// with ok (a failure is a usage error), and opens the data directory. The
// caller closes the returned env.
func openVerb(ctx context.Context, fs *flag.FlagSet, args []string, usage string, ok func(args []string) bool) (*env, []string, error) {
	var cfg config
	args, err := parseFlags(fs, &cfg, args)
	if err != nil {
		return nil, nil, err
	} else if !ok(args) {
		return nil, nil, bothy.Errorf(bothy.EINVALID, "usage: %s", usage)
	}
	e, err := openEnv(ctx, cfg)
	return e, args, err
}

// openBlobs opens the blob store that cfg names.
func openBlobs(ctx context.Context, cfg config) (bothy.BlobStore, error) {
	switch {
	case strings.HasPrefix(cfg.blobs, "gs://"):
		return gcs.Open(ctx, cfg.blobs)
	case cfg.blobs == "":
		return localblob.Open(filepath.Join(cfg.data, "blobs"))
	default:
		return localblob.Open(cfg.blobs)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/secretfile"
)

// defaultScopes are the scopes of a new token unless --scopes says otherwise:
// everything but admin.
var defaultScopes = []string{bothy.ScopeComputersRead, bothy.ScopeComputersWrite, bothy.ScopeFilesRead, bothy.ScopeFilesWrite}

const adminUsage = `usage:
  bothy admin token create --tenant T --owner O [--scopes a,b] [--expires D] [--json]
  bothy admin token revoke --tenant T TOKEN_ID
  bothy admin agent join --id ID [--expires 1h]   a one-time join token for bothy agent --join-token-file
  bothy admin secret put --tenant T NAME < VALUE
the token acts on its owner's computers only, unless it holds computers:any (or admin)
scopes: ` + "computers:read, computers:write, files:read, files:write, computers:any (every owner's computers of the tenant), admin, profile:NAME (a token without profile scopes may use the standard profile only), egress:allowlist|all, secret:NAME|*, budget:cpu-seconds|wall-seconds|bytes=N; or alone agent:ID, an agent's token (bothy agent --id ID)"

// runAdmin runs operator verbs against the store directly, not through the
// server: they work before any token exists.
func runAdmin(ctx context.Context, args []string) error {
	if len(args) >= 2 && args[0] == "secret" && args[1] == "put" {
		return runSecretPut(args[2:])
	}
	if len(args) >= 2 && args[0] == "agent" && args[1] == "join" {
		return runAgentJoin(ctx, args[2:])
	}
	if len(args) < 2 || args[0] != "token" {
		return bothy.Errorf(bothy.EINVALID, "%s", adminUsage)
	}
	switch args[1] {
	case "create":
		return runTokenCreate(ctx, args[2:])
	case "revoke":
		return runTokenRevoke(ctx, args[2:])
	}
	return bothy.Errorf(bothy.EINVALID, "%s", adminUsage)
}

func runTokenCreate(ctx context.Context, args []string) error {
	var cfg config
	fs := flag.NewFlagSet("admin token create", flag.ContinueOnError)
	owner := fs.String("owner", "", "owner the token acts for: it acts on the computers its owner created (required)")
	scopes := fs.String("scopes", strings.Join(defaultScopes, ","), "comma-separated scopes")
	expires := fs.Duration("expires", 0, "lifetime, such as 720h (default: never expires)")
	asJSON := fs.Bool("json", false, "print the token as JSON")
	args, err := parseFlags(fs, &cfg, args)
	if err != nil {
		return err
	} else if len(args) != 0 || *owner == "" || *expires < 0 {
		return bothy.Errorf(bothy.EINVALID, "%s", adminUsage)
	}
	var list []string
	for _, s := range strings.Split(*scopes, ",") {
		if s = strings.TrimSpace(s); s != "" {
			list = append(list, s)
		}
	}
	if err := bothy.ValidateScopes(list); err != nil {
		return err
	}
	var at time.Time
	if *expires > 0 {
		at = time.Now().Add(*expires)
	}
	// openEnv creates the tenant if it is missing.
	e, err := openEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	tok, secret, err := e.store.CreateToken(ctx, e.tenant.ID, *owner, list, at)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			*bothy.Token
			Secret string `json:"token"`
		}{tok, secret})
	}
	fmt.Fprintf(os.Stderr, "created token %s for tenant %s, owner %s, scopes %s\n", tok.ID, tok.TenantID, tok.Owner, strings.Join(tok.Scopes, ","))
	fmt.Println(secret)
	return nil
}

// runAgentJoin prints a join token: the agent ID exchanges it, once, for
// an expiring agent token of its own (bothy agent --join-token-file).
func runAgentJoin(ctx context.Context, args []string) error {
	var cfg config
	fs := flag.NewFlagSet("admin agent join", flag.ContinueOnError)
	id := fs.String("id", "", "the agent's id (bothy agent --id; required)")
	expires := fs.Duration("expires", time.Hour, "how long the join token may wait for its use")
	args, err := parseFlags(fs, &cfg, args)
	if err != nil {
		return err
	} else if len(args) != 0 || *id == "" || *expires <= 0 {
		return bothy.Errorf(bothy.EINVALID, "%s", adminUsage)
	}
	e, err := openEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	tok, secret, err := e.store.CreateToken(ctx, e.tenant.ID, "agents", []string{bothy.ScopeEnrolPrefix + *id}, time.Now().Add(*expires))
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "created join token %s for agent %s, usable once until %s\n", tok.ID, *id, tok.ExpiresAt.Format(time.RFC3339))
	fmt.Println(secret)
	return nil
}

func runTokenRevoke(ctx context.Context, args []string) error {
	var cfg config
	fs := flag.NewFlagSet("admin token revoke", flag.ContinueOnError)
	args, err := parseFlags(fs, &cfg, args)
	if err != nil {
		return err
	} else if len(args) != 1 {
		return bothy.Errorf(bothy.EINVALID, "%s", adminUsage)
	}
	e, err := openEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	if err := e.store.RevokeToken(ctx, e.tenant.ID, args[0]); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "revoked token %s\n", args[0])
	return nil
}

// runSecretPut stores a secret of a tenant in the data directory's secret
// store (DATA/secrets), reading its value from standard input without its
// trailing newline.
func runSecretPut(args []string) error {
	var cfg config
	fs := flag.NewFlagSet("admin secret put", flag.ContinueOnError)
	args, err := parseFlags(fs, &cfg, args)
	if err != nil {
		return err
	} else if len(args) != 1 {
		return bothy.Errorf(bothy.EINVALID, "%s", adminUsage)
	}
	value, err := io.ReadAll(io.LimitReader(os.Stdin, bothy.MaxSecretBytes+2))
	if err != nil {
		return err
	}
	// `echo VALUE | bothy admin secret put` means VALUE, without the newline.
	value = bytes.TrimSuffix(value, []byte("\n"))
	if err := secretfile.NewStore(filepath.Join(cfg.data, "secrets")).Put(cfg.tenant, args[0], value); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "stored secret %s of tenant %s\n", args[0], cfg.tenant)
	return nil
}

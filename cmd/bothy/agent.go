package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/process"
	bserver "github.com/bothyhq/bothy/server"
)

// runConfig holds serve's flags for running computers.
type runConfig struct {
	profileMap   string
	allowProcess bool
	noAgent      bool
	idle         time.Duration
	lifetime     time.Duration
}

func (rc *runConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&rc.profileMap, "profiles", "standard=bwrap", "profiles and the provider serving each: NAME=PROVIDER,...")
	fs.BoolVar(&rc.allowProcess, "allow-process", false, "allow a profile to use the process provider, which isolates nothing (development, paired machines)")
	fs.BoolVar(&rc.noAgent, "no-agent", false, "run no in-process agent (agents connect with \"bothy agent\")")
	fs.DurationVar(&rc.idle, "idle-timeout", 5*time.Minute, "stop a computer that ran nothing for this long")
	fs.DurationVar(&rc.lifetime, "max-lifetime", 12*time.Hour, "stop a lease this long after it started")
}

// profiles parses --profiles. The process provider is refused unless
// --allow-process is given: a profile never silently runs unisolated.
func (rc *runConfig) profiles() (map[string]string, error) {
	out := map[string]string{}
	for item := range strings.SplitSeq(rc.profileMap, ",") {
		name, prov, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || prov == "" {
			return nil, bothy.Errorf(bothy.EINVALID, "--profiles wants NAME=PROVIDER,..., not %q", item)
		}
		if prov == process.Name && !rc.allowProcess {
			return nil, bothy.Errorf(bothy.EINVALID, "profile %q names the process provider, which isolates nothing; pass --allow-process to allow it", name)
		}
		known := false
		for _, p := range providerNames {
			known = known || p == prov
		}
		if !known {
			return nil, bothy.Errorf(bothy.EINVALID, "profile %q names unknown provider %q (known: %s)", name, prov, strings.Join(providerNames, ", "))
		}
		out[name] = prov
	}
	return out, nil
}

// agentID names this host's agent: "local-" and the host name.
func agentID() string {
	host, _ := os.Hostname()
	if host == "" {
		return "local"
	}
	return "local-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, host)
}

// runAgent is `bothy agent --control URL --agent-token-file F`: an agent on
// another host (or a paired machine) that dials out to a control plane.
func runAgent(ctx context.Context, args []string) error {
	var cfg config
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	url := fs.String("control", os.Getenv("BOTHY_URL"), "the control plane's URL")
	tokenFile := fs.String("agent-token-file", "", "file holding the agent token (the server's DATA/agent.token)")
	args, err := parseFlags(fs, &cfg, args)
	if err != nil {
		return err
	} else if len(args) != 0 || *url == "" || *tokenFile == "" {
		return bothy.Errorf(bothy.EINVALID, "usage: bothy agent --control URL --agent-token-file FILE [--data DIR] [--blobs URL]")
	} else if cfg.blobs == "" {
		return bothy.Errorf(bothy.EINVALID, "bothy agent needs --blobs: the control plane's blob store (its DATA/blobs, or gs://...)")
	}
	b, err := os.ReadFile(*tokenFile)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.data, 0o700); err != nil {
		return err
	}
	blobs, err := openBlobs(ctx, cfg)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	sup, err := bserver.Exe()
	if err != nil {
		return err
	}
	ag, err := bserver.NewAgent(cfg.data, agentID(), *url, strings.TrimSpace(string(b)), blobs, providers(), sup, log)
	if err != nil {
		return err
	}
	return ag.Run(ctx)
}

// readOrCreateSecret returns the secret in path, creating it (mode 0600)
// if the file is missing.
func readOrCreateSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		// A secret file others can read is tightened, as the admin
		// token's is.
		if fi, serr := os.Stat(path); serr == nil && fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(path, 0o600); err != nil {
				return "", fmt.Errorf("protect %s: %w", path, err)
			}
		}
		return strings.TrimSpace(string(b)), nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	secret := "bat_" + hex.EncodeToString(raw)
	if err := writeSecret(path, secret); err != nil {
		return "", fmt.Errorf("agent token: %w", err)
	}
	return secret, nil
}

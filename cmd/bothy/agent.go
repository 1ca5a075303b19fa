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
	"strconv"
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
	memory       string
	cpus         float64
	pids         int64
}

func (rc *runConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&rc.profileMap, "profiles", "standard=bwrap", "profiles and the provider serving each: NAME=PROVIDER,...")
	fs.BoolVar(&rc.allowProcess, "allow-process", false, "allow a profile to use the process provider, which isolates nothing (development, paired machines)")
	fs.BoolVar(&rc.noAgent, "no-agent", false, "run no in-process agent (agents connect with \"bothy agent\")")
	fs.DurationVar(&rc.idle, "idle-timeout", 5*time.Minute, "stop a computer that ran nothing for this long")
	fs.DurationVar(&rc.lifetime, "max-lifetime", 12*time.Hour, "stop a lease this long after it started")
	fs.StringVar(&rc.memory, "lease-memory", "2GiB", "each lease's memory limit (KiB, MiB, GiB suffixes); exceeding it OOM-kills in that lease only")
	fs.Float64Var(&rc.cpus, "lease-cpus", 1, "each lease's CPU limit, in CPUs (0.5 is half a CPU)")
	fs.Int64Var(&rc.pids, "lease-pids", 4096, "each lease's limit on processes and threads at once")
}

// limits parses the lease limit flags.
func (rc *runConfig) limits() (bothy.Limits, error) {
	mem, err := parseBytes(rc.memory)
	if err != nil {
		return bothy.Limits{}, bothy.Errorf(bothy.EINVALID, "--lease-memory: %v", err)
	} else if mem < 32<<20 {
		return bothy.Limits{}, bothy.Errorf(bothy.EINVALID, "--lease-memory must be at least 32MiB")
	} else if rc.cpus <= 0 || rc.cpus > 1024 {
		return bothy.Limits{}, bothy.Errorf(bothy.EINVALID, "--lease-cpus must be above 0")
	} else if rc.pids < 64 {
		return bothy.Limits{}, bothy.Errorf(bothy.EINVALID, "--lease-pids must be at least 64")
	}
	return bothy.Limits{MemoryBytes: mem, CPUMillis: int64(rc.cpus * 1000), Pids: rc.pids}, nil
}

// parseBytes parses a size such as 512MiB, 2GiB or 1048576.
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size like 512MiB or 2GiB", s)
	}
	return n * mult, nil
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

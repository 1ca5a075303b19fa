package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/cmd/internal/providers"
	"github.com/bothyhq/bothy/hostcache"
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
	nofile       int64
	cmdTimeout   time.Duration
	scratch      string
	allowPrivate string
	policyFile   string
	cacheBytes   string
	workspace    string
	set          map[string]bool // flags given on the command line
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
	fs.DurationVar(&rc.cmdTimeout, "command-timeout", time.Hour, "the timeout of a command whose run gives none (timeout_ms); 0 is none")
	fs.Int64Var(&rc.nofile, "lease-nofile", 1024, "each command's limit on open files (RLIMIT_NOFILE, soft and hard), per process")
	fs.StringVar(&rc.scratch, "lease-scratch", "10GiB", "each lease's limit on what its commands write (a file may not grow past it; a command whose writes pass it is killed, disk_limited)")
	fs.StringVar(&rc.cacheBytes, "cache-bytes", "10GiB", cacheBytesUsage)
	fs.StringVar(&rc.allowPrivate, "egress-allow-private", "", "CIDR prefixes (comma-separated) the egress broker may reach although loopback or private; the metadata address stays denied")
	fs.StringVar(&rc.workspace, "workspace", "overlay", workspaceUsage)
	fs.StringVar(&rc.policyFile, "policy", "", "policy file (JSON bothy.Policy: profiles, limits, egress_allow_private, command_timeout_ms, cache_bytes); replaces --profiles, --lease-*, --command-timeout, --egress-allow-private and --cache-bytes")
}

// policy returns the server's policy: the --policy file, or one built from
// the flags. A flag that the file would override is refused, so that the
// policy in force is the one written down.
func (rc *runConfig) policy(fs *flag.FlagSet) (*bothy.Policy, error) {
	if rc.policyFile == "" {
		profiles, err := rc.profiles()
		if err != nil {
			return nil, err
		}
		limits, err := rc.limits()
		if err != nil {
			return nil, err
		}
		if rc.cmdTimeout < 0 {
			return nil, bothy.Errorf(bothy.EINVALID, "--command-timeout must not be negative")
		}
		cache, err := parseBytes(rc.cacheBytes)
		if err != nil {
			return nil, bothy.Errorf(bothy.EINVALID, "--cache-bytes: %v", err)
		}
		p := &bothy.Policy{Profiles: profiles, Limits: limits, CommandTimeoutMS: rc.cmdTimeout.Milliseconds(), CacheBytes: cache}
		for s := range strings.SplitSeq(rc.allowPrivate, ",") {
			if s = strings.TrimSpace(s); s != "" {
				p.EgressAllowPrivate = append(p.EgressAllowPrivate, s)
			}
		}
		return p, p.Validate()
	}
	var clash []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "profiles", "lease-memory", "lease-cpus", "lease-pids", "lease-nofile", "lease-scratch", "command-timeout", "egress-allow-private", "cache-bytes":
			clash = append(clash, "--"+f.Name)
		}
	})
	if len(clash) > 0 {
		return nil, bothy.Errorf(bothy.EINVALID, "--policy replaces %s: put them in the policy file", strings.Join(clash, ", "))
	}
	b, err := os.ReadFile(rc.policyFile)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	var p bothy.Policy
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, bothy.Errorf(bothy.EINVALID, "policy %s: %v", rc.policyFile, err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	for name, prov := range p.Profiles {
		if err := rc.checkProvider(name, prov); err != nil {
			return nil, err
		}
	}
	return &p, nil
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
	} else if rc.nofile < 64 {
		return bothy.Limits{}, bothy.Errorf(bothy.EINVALID, "--lease-nofile must be at least 64")
	}
	scratch, err := parseBytes(rc.scratch)
	if err != nil {
		return bothy.Limits{}, bothy.Errorf(bothy.EINVALID, "--lease-scratch: %v", err)
	}
	return bothy.Limits{MemoryBytes: mem, CPUMillis: int64(rc.cpus * 1000), Pids: rc.pids, ScratchBytes: scratch, OpenFiles: rc.nofile}, nil
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
		if err := rc.checkProvider(name, prov); err != nil {
			return nil, err
		}
		out[name] = prov
	}
	return out, nil
}

// checkProvider refuses an unknown provider, and the process provider
// unless --allow-process is given: a profile never silently runs
// unisolated.
func (rc *runConfig) checkProvider(profile, prov string) error {
	if prov == process.Name && !rc.allowProcess {
		return bothy.Errorf(bothy.EINVALID, "profile %q names the process provider, which isolates nothing; pass --allow-process to allow it", profile)
	}
	for _, p := range providers.Names {
		if p == prov {
			return nil
		}
	}
	return bothy.Errorf(bothy.EINVALID, "profile %q names unknown provider %q (known: %s)", profile, prov, strings.Join(providers.Names, ", "))
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

// cacheBytesUsage is the help of serve's and agent's --cache-bytes.
const cacheBytesUsage = "bound on the host cache of materialized revisions (DATA/cache): past it the least recently used trees no lease uses are evicted"

// workspaceUsage is the help of serve's and agent's --workspace.
const workspaceUsage = "how a lease's workspace is made: overlay (an overlayfs over the host cache; needs root) or copy (a plain copy of the base revision; needs no root, for the process provider only)"

// runAgent is `bothy agent --control URL --agent-token-file F`: an agent on
// another host (or a paired machine) that dials out to a control plane.
func runAgent(ctx context.Context, args []string) error {
	var cfg config
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	url := fs.String("control", os.Getenv("BOTHY_URL"), "the control plane's URL")
	tokenFile := fs.String("agent-token-file", "", "file holding a token with the single scope agent:ID (bothy admin token create --scopes agent:ID --expires D), instead of enrolling")
	joinFile := fs.String("join-token-file", "", "file holding a one-time join token (bothy admin agent join --id ID), exchanged at the first start for an expiring agent token kept in DATA/"+bserver.CredentialFile+" and renewed at half its life")
	caFile := fs.String("ca-file", os.Getenv("BOTHY_CA"), "PEM certificates that the control plane's must chain to (its DATA/tls/ca.pem for --tls-self-signed; default: env BOTHY_CA, else the system's roots)")
	id := fs.String("id", agentID(), "the agent's id (its token polls as that id only)")
	allowPrivate := fs.String("egress-allow-private", "", "CIDR prefixes (comma-separated) the egress broker may reach although loopback or private; the metadata address stays denied")
	workspace := fs.String("workspace", "overlay", workspaceUsage)
	cacheBytes := fs.String("cache-bytes", "10GiB", cacheBytesUsage)
	args, err := parseFlags(fs, &cfg, args)
	usage := "usage: bothy agent --control URL [--join-token-file FILE | --agent-token-file FILE] [--ca-file PEM] [--id ID] [--data DIR] --blobs URL [--workspace overlay|copy]"
	if err != nil {
		return err
	} else if len(args) != 0 || *url == "" {
		return bothy.Errorf(bothy.EINVALID, "%s", usage)
	} else if *tokenFile != "" && *joinFile != "" {
		return bothy.Errorf(bothy.EINVALID, "--agent-token-file and --join-token-file exclude each other")
	} else if cfg.blobs == "" {
		return bothy.Errorf(bothy.EINVALID, "bothy agent needs --blobs: the control plane's blob store (its DATA/blobs, or gs://...)")
	}
	cacheMax, err := parseBytes(*cacheBytes)
	if err != nil || cacheMax <= 0 {
		return bothy.Errorf(bothy.EINVALID, "--cache-bytes %q is not a size above 0", *cacheBytes)
	}
	if err := os.MkdirAll(cfg.data, 0o700); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	_, tlsConfig, err := caClient(*caFile)
	if err != nil {
		return err
	}
	if strings.HasPrefix(*url, "http://") && !loopbackURL(*url) {
		log.Warn("the control plane's URL is plain HTTP beyond loopback: the agent token, lease credentials and secret values cross the network in clear text", "control", *url)
	}
	ac := bserver.AgentConfig{Data: cfg.data, ID: *id, URL: *url, TLS: tlsConfig, CacheBytes: cacheMax, Logger: log}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return err
		}
		ac.Token = strings.TrimSpace(string(b))
	} else {
		join := ""
		if *joinFile != "" {
			b, err := os.ReadFile(*joinFile)
			if err != nil {
				return err
			}
			join = strings.TrimSpace(string(b))
		}
		cred, err := bserver.LoadCredential(ctx, cfg.data, *id, bserver.RuntimeClient(*url, tlsConfig), join, log)
		if err != nil {
			return err
		}
		go cred.Run(ctx)
		ac.TokenSource = cred.Token
	}
	blobs, err := openBlobs(ctx, cfg)
	if err != nil {
		return err
	}
	sup, err := bserver.Exe()
	if err != nil {
		return err
	}
	ac.Blobs, ac.Providers, ac.Supervisor, ac.Workspace, ac.EgressAllowPrivate = blobs, providers.All(), sup, hostcache.Mode(*workspace), splitList(*allowPrivate)
	ag, err := bserver.NewAgent(ac)
	if err != nil {
		return err
	}
	return ag.Run(ctx)
}

// newAgentSecret returns a new agent token for the in-process agent.
func newAgentSecret() string {
	raw := make([]byte, 32)
	rand.Read(raw)
	return "bat_" + hex.EncodeToString(raw)
}

// fileExists reports whether path names something.
func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// loopbackURL reports whether a URL's host is a loopback address or
// localhost.
func loopbackURL(s string) bool {
	u, err := neturl.Parse(s)
	if err != nil {
		return false
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(u.Hostname(), "localhost")
}

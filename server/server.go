// Package server wires bothy's control plane into one HTTP server: the
// public API (package http) over the store and the workspace, made
// consistent with running computers (control.Files), the runtime protocol
// (package runtime) under /runtime/v1/, and, in the embedded default, an
// agent in the same process that dials that protocol over loopback like
// any other agent. `bothy serve` and the benchmarks run it.
package server

import (
	"context"
	"crypto/ed25519"
	"debug/buildinfo"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/agent"
	"github.com/bothyhq/bothy/control"
	"github.com/bothyhq/bothy/egress"
	"github.com/bothyhq/bothy/hostcache"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/receipt"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/workspace"
)

// Config configures a Server.
type Config struct {
	// Data is the data directory: the in-process agent keeps its leases in
	// DATA/agent and its host cache in DATA/cache.
	Data  string
	Store bothy.Store
	Blobs bothy.BlobStore
	// Policy, if set, is the server's policy: it sets Profiles and
	// Control.Limits, and its digest is stated in receipts.
	Policy *bothy.Policy
	// Profiles maps profiles to provider names.
	Profiles map[string]string
	// AgentToken authenticates agents.
	AgentToken string
	// Agent runs an in-process agent with these providers, which spawns
	// supervisors with SupervisorCommand (Exe). No providers means no
	// in-process agent.
	Providers         []bothy.Provider
	SupervisorCommand []string
	// AgentID names the in-process agent (default "local").
	AgentID string
	// Workspace is how the in-process agent materializes workspaces
	// (agent.Config.Workspace): "" is an overlay, hostcache.ModeCopy a
	// plain copy that needs no root.
	Workspace hostcache.Mode
	// ReceiptKey signs receipts; nil is a random key, whose receipts
	// cannot be verified once the process ends (`bothy serve` keeps one in
	// DATA/receipt.key).
	ReceiptKey ed25519.PrivateKey
	// Version names the build in receipts' image digests.
	Version string
	// Control configures the control plane; Profiles, AgentToken,
	// Receipts, Version and Logger are set from the fields above.
	Control control.Config
	// MinFreeBytes is the free space on Data's disk under which GET
	// /readyz reports the server not ready (0 is DefaultMinFreeBytes).
	MinFreeBytes int64
	Logger       *slog.Logger
}

// Server is the assembled control plane.
type Server struct {
	cfg     Config
	ctl     *control.Controller
	handler http.Handler
}

// New assembles a server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Blobs == nil || cfg.Data == "" {
		return nil, errors.New("server: Store, Blobs and Data are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AgentID == "" {
		cfg.AgentID = "local"
	}
	if _, err := hostcache.ParseMode(string(cfg.Workspace)); err != nil {
		return nil, err
	}
	cc := cfg.Control
	if p := cfg.Policy; p != nil {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		cfg.Profiles, cc.Limits, cc.PolicyDigest = p.Profiles, p.Limits, receipt.PolicyDigest(p)
	}
	cc.Profiles, cc.AgentToken, cc.Logger = cfg.Profiles, cfg.AgentToken, cfg.Logger
	cc.Receipts, cc.Version = receipt.NewSigner(cfg.ReceiptKey), cfg.Version
	ctl := control.New(cfg.Store, cc)
	names := make([]string, 0, len(cfg.Profiles))
	for name := range cfg.Profiles {
		names = append(names, name)
	}
	slices.Sort(names)
	files := workspace.New(cfg.Store, cfg.Blobs, workspace.Options{})
	if cfg.MinFreeBytes <= 0 {
		cfg.MinFreeBytes = DefaultMinFreeBytes
	}
	checks := []bhttp.Check{{Name: "disk", Check: diskCheck(cfg.Data, cfg.MinFreeBytes)}}
	api := bhttp.NewServer(cfg.Store, ctl.Files(files), bhttp.Options{Logger: cfg.Logger, Compute: ctl, Receipts: ctl, Profiles: names, Checks: checks})
	rt := runtime.Handler(ctl, cfg.Logger)
	// Not a ServeMux: it would clean "a/../b" in a file path and redirect,
	// where the API refuses it.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, runtime.PathPrefix) {
			rt.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
	return &Server{cfg: cfg, ctl: ctl, handler: h}, nil
}

// Handler serves the API and the runtime protocol.
func (s *Server) Handler() http.Handler { return s.handler }

// Run runs the control plane's reconciler and, with providers, the
// in-process agent, which dials url (where Handler is served), until ctx
// is done. Leases keep running after Run returns: their supervisors
// outlive the process, and the next Run on the same data directory takes
// them over.
func (s *Server) Run(ctx context.Context, url string) error {
	errc := make(chan error, 2)
	go func() { errc <- s.ctl.Run(ctx) }()
	n := 1
	if len(s.cfg.Providers) > 0 {
		ag, err := s.newAgent(url)
		if err != nil {
			return err
		}
		n++
		go func() { errc <- ag.Run(ctx) }()
	}
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (s *Server) newAgent(url string) (*agent.Agent, error) {
	var allow []string
	if s.cfg.Policy != nil {
		allow = s.cfg.Policy.EgressAllowPrivate
	}
	return NewAgent(AgentConfig{Data: s.cfg.Data, ID: s.cfg.AgentID, URL: url, Token: s.cfg.AgentToken, Blobs: s.cfg.Blobs,
		Providers: s.cfg.Providers, Supervisor: s.cfg.SupervisorCommand, Workspace: s.cfg.Workspace,
		EgressAllowPrivate: allow, Logger: s.cfg.Logger})
}

// AgentConfig configures NewAgent.
type AgentConfig struct {
	// Data is the data directory: leases in DATA/agent, the host cache in
	// DATA/cache.
	Data, ID string
	// URL is the control plane's, and Token the agent token.
	URL, Token string
	Blobs      bothy.BlobStore
	Providers  []bothy.Provider
	// Supervisor is the command that runs a lease's supervisor.
	Supervisor []string
	// Workspace is agent.Config.Workspace.
	Workspace hostcache.Mode
	// EgressAllowPrivate lists the CIDR prefixes the egress broker may
	// reach although private (bothy.Policy).
	EgressAllowPrivate []string
	Logger             *slog.Logger
}

// NewAgent returns an agent that keeps its leases in DATA/agent and its
// host cache in DATA/cache, and polls the control plane. It has an egress
// broker when the host can make network namespaces (root, with ip and
// nft); without one, computers whose egress is not none cannot start here.
func NewAgent(cfg AgentConfig) (*agent.Agent, error) {
	cache, err := hostcache.Open(filepath.Join(cfg.Data, "cache"))
	if err != nil {
		return nil, err
	}
	provs := map[string]bothy.Provider{}
	for _, p := range cfg.Providers {
		provs[p.Name()] = p
	}
	allow, err := bothy.ParseAllowPrivate(cfg.EgressAllowPrivate)
	if err != nil {
		return nil, err
	}
	var eg *agent.Egress
	if why := egress.Unavailable(); why != "" {
		cfg.Logger.Warn("no egress broker: computers whose egress is not none cannot start on this agent", "reason", why)
	} else {
		eg = &agent.Egress{Broker: egress.NewBroker(egress.BrokerOptions{AllowPrivate: allow, Logger: cfg.Logger})}
	}
	return agent.New(agent.Config{
		ID: cfg.ID, Dir: filepath.Join(cfg.Data, "agent"), Control: runtime.NewClient(cfg.URL), Token: cfg.Token,
		Providers: provs, Blobs: cfg.Blobs, Cache: cache, Workspace: cfg.Workspace, SupervisorCommand: cfg.Supervisor,
		Egress: eg, Logger: cfg.Logger,
	})
}

// SupervisorProgram is the supervisor's own program (cmd/bothy-supervisor),
// which Exe looks for beside the running binary.
const SupervisorProgram = "bothy-supervisor"

// Exe returns the supervisor command of the running binary (SupervisorFor).
func Exe() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return SupervisorFor(exe), nil
}

// SupervisorFor returns the command that runs a lease's supervisor for the
// bothy binary exe: SupervisorProgram beside it, if that is an executable
// of the same build (module version and VCS revision), because it holds
// far less memory per lease than the whole of bothy; else exe's own
// "supervisor" verb (go run, test binaries, a stale program).
func SupervisorFor(exe string) []string {
	sup := filepath.Join(filepath.Dir(exe), SupervisorProgram)
	if fi, err := os.Stat(sup); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 && sameBuild(exe, sup) {
		return []string{sup}
	}
	return []string{exe, "supervisor"}
}

// sameBuild reports whether the binaries a and b were built from the same
// module version and VCS revision.
func sameBuild(a, b string) bool {
	ia, err := buildinfo.ReadFile(a)
	if err != nil {
		return false
	}
	ib, err := buildinfo.ReadFile(b)
	if err != nil {
		return false
	}
	return ia.Main.Path == ib.Main.Path && buildID(ia) == buildID(ib)
}

// buildID names a build by its module version and VCS settings.
func buildID(bi *debug.BuildInfo) string {
	id := bi.GoVersion + " " + bi.Main.Version
	for _, s := range bi.Settings {
		if strings.HasPrefix(s.Key, "vcs.") {
			id += " " + s.Key + "=" + s.Value
		}
	}
	return id
}

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
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/agent"
	"github.com/bothyhq/bothy/control"
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
	// supervisors with SupervisorCommand (the bothy binary's
	// "supervisor"). No providers means no in-process agent.
	Providers         []bothy.Provider
	SupervisorCommand []string
	// AgentID names the in-process agent (default "local").
	AgentID string
	// ReceiptKey signs receipts; nil is a random key, whose receipts
	// cannot be verified once the process ends (`bothy serve` keeps one in
	// DATA/receipt.key).
	ReceiptKey ed25519.PrivateKey
	// Version names the build in receipts' image digests.
	Version string
	// Control configures the control plane; Profiles, AgentToken,
	// Receipts, Version and Logger are set from the fields above.
	Control control.Config
	Logger  *slog.Logger
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
	files := workspace.New(cfg.Store, cfg.Blobs, workspace.Options{Runtime: ctl})
	api := bhttp.NewServer(cfg.Store, ctl.Files(files), bhttp.Options{Logger: cfg.Logger, Compute: ctl, Receipts: ctl, Profiles: names})
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
	return NewAgent(s.cfg.Data, s.cfg.AgentID, url, s.cfg.AgentToken, s.cfg.Blobs, s.cfg.Providers, s.cfg.SupervisorCommand, s.cfg.Logger)
}

// NewAgent returns an agent that keeps its leases in DATA/agent and its
// host cache in DATA/cache, and polls the control plane at url.
func NewAgent(data, id, url, token string, blobs bothy.BlobStore, providers []bothy.Provider, supervisor []string, log *slog.Logger) (*agent.Agent, error) {
	cache, err := hostcache.Open(filepath.Join(data, "cache"))
	if err != nil {
		return nil, err
	}
	provs := map[string]bothy.Provider{}
	for _, p := range providers {
		provs[p.Name()] = p
	}
	return agent.New(agent.Config{
		ID: id, Dir: filepath.Join(data, "agent"), Control: runtime.NewClient(url), Token: token,
		Providers: provs, Blobs: blobs, Cache: cache, SupervisorCommand: supervisor, Logger: log,
	})
}

// Exe returns the supervisor command of the running binary.
func Exe() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return []string{exe, "supervisor"}, nil
}

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
	"crypto/tls"
	"debug/buildinfo"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

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
	// AgentToken authenticates agents: the in-process agent, which polls
	// with it (agents elsewhere hold tokens of the store).
	AgentToken string
	// AgentTLS, if set, is the in-process agent's TLS configuration for
	// dialing the server's own HTTPS listener.
	AgentTLS *tls.Config
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
	// Listeners are the addresses the server's HTTP listener (the API and
	// the runtime protocol) is bound to; the in-process agent's egress
	// broker always denies them (egress.BrokerOptions.OwnListeners).
	Listeners []netip.AddrPort
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
		cc.CommandTimeout = time.Duration(p.CommandTimeoutMS) * time.Millisecond
	}
	cc.Profiles, cc.AgentToken, cc.Logger = cfg.Profiles, cfg.AgentToken, cfg.Logger
	cc.Receipts, cc.Version = receipt.NewSigner(cfg.ReceiptKey), cfg.Version
	// Only the in-process agent's providers are known to isolate: a
	// remote agent's host may lack what they need (its kernel's Landlock).
	cc.Isolating = map[string]bool{}
	for _, p := range cfg.Providers {
		if i, ok := p.(bothy.CommandIsolator); ok && i.IsolatesCommands() {
			cc.Isolating[p.Name()] = true
		}
	}
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
	// One budget bounds the bodies both read at once.
	budget := bhttp.NewBudget(bhttp.DefaultBudget)
	api := bhttp.NewServer(cfg.Store, ctl.Files(files), bhttp.Options{Logger: cfg.Logger, Compute: ctl, Receipts: ctl, Profiles: names, Checks: checks, Budget: budget})
	rt := runtime.Handler(ctl, cfg.Logger, budget)
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
//
// When ctx is done the agent polls no more and drains: the lease stops in
// flight get agent.DefaultDrainTimeout to checkpoint, commit and report
// their release, which the control plane, still running, takes and
// answers the stop requests waiting for. Then the control plane stops:
// the waits still open (long polls, event streams, stop requests whose
// lease was not released) answer 503. The caller keeps serving Handler
// until Run returns, then shuts its HTTP server down.
func (s *Server) Run(ctx context.Context, url string) error {
	ctlCtx, stopCtl := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCtl()
	errc := make(chan error, 2)
	go func() { errc <- s.ctl.Run(ctlCtx) }()
	n := 1
	if len(s.cfg.Providers) > 0 {
		ag, err := s.newAgent(url)
		if err != nil {
			return err
		}
		n++
		go func() {
			err := ag.Run(ctx)
			stopCtl()
			errc <- err
		}()
	} else {
		go func() {
			select {
			case <-ctx.Done():
			case <-ctlCtx.Done():
			}
			stopCtl()
		}()
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
	cacheBytes := s.cfg.Policy.CacheLimit()
	return NewAgent(AgentConfig{Data: s.cfg.Data, ID: s.cfg.AgentID, URL: url, Token: s.cfg.AgentToken, TLS: s.cfg.AgentTLS, Blobs: s.cfg.Blobs,
		Providers: s.cfg.Providers, Supervisor: s.cfg.SupervisorCommand, Workspace: s.cfg.Workspace,
		EgressAllowPrivate: allow, CacheBytes: cacheBytes, OwnListeners: s.cfg.Listeners, Logger: s.cfg.Logger})
}

// AgentConfig configures NewAgent.
type AgentConfig struct {
	// Data is the data directory: leases in DATA/agent, the host cache in
	// DATA/cache.
	Data, ID string
	// URL is the control plane's, and Token the agent token, or
	// TokenSource its source (an enrolled agent's Credential.Token).
	URL, Token  string
	TokenSource func() string
	// TLS, if set, is how the agent checks the control plane's
	// certificate (nil: the system's roots, for an https URL).
	TLS       *tls.Config
	Blobs     bothy.BlobStore
	Providers []bothy.Provider
	// Supervisor is the command that runs a lease's supervisor.
	Supervisor []string
	// Workspace is agent.Config.Workspace.
	Workspace hostcache.Mode
	// CacheBytes bounds the host cache (hostcache.Cache.MaxBytes; 0 is
	// bothy.DefaultCacheBytes).
	CacheBytes int64
	// EgressAllowPrivate lists the CIDR prefixes the egress broker may
	// reach although private (bothy.Policy).
	EgressAllowPrivate []string
	// OwnListeners are addresses bothy listens on that the egress broker
	// always denies; the control plane's URL, when its host is an IP
	// address or localhost, is added to them.
	OwnListeners []netip.AddrPort
	Logger       *slog.Logger
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
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cache.MaxBytes, cache.Logger = cfg.CacheBytes, cfg.Logger
	if cache.MaxBytes <= 0 {
		cache.MaxBytes = bothy.DefaultCacheBytes
	}
	provs := map[string]bothy.Provider{}
	for _, p := range cfg.Providers {
		provs[p.Name()] = p
	}
	allow, err := bothy.ParseAllowPrivate(cfg.EgressAllowPrivate)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var eg *agent.Egress
	if why := egress.Unavailable(); why != "" {
		cfg.Logger.Warn("no egress broker: computers whose egress is not none cannot start on this agent", "reason", why)
	} else {
		if lo := bothy.AllowPrivateLoopback(allow); len(lo) > 0 {
			cfg.Logger.Warn("egress_allow_private admits loopback: sandboxes may reach every service listening on this host's loopback (bothy's own listeners stay denied)", "prefixes", lo)
		}
		own := append(slices.Clone(cfg.OwnListeners), urlListeners(cfg.URL)...)
		eg = &agent.Egress{Broker: egress.NewBroker(egress.BrokerOptions{AllowPrivate: allow, OwnListeners: own, Logger: cfg.Logger})}
	}
	return agent.New(agent.Config{
		ID: cfg.ID, Dir: filepath.Join(cfg.Data, "agent"), Control: RuntimeClient(cfg.URL, cfg.TLS), Token: cfg.Token, TokenSource: cfg.TokenSource,
		Providers: provs, Blobs: cfg.Blobs, Cache: cache, Workspace: cfg.Workspace, SupervisorCommand: cfg.Supervisor,
		Egress: eg, Logger: cfg.Logger,
	})
}

// urlListeners returns the address and port of a URL whose host is an IP
// address or localhost (both loopback addresses), else none.
func urlListeners(s string) []netip.AddrPort {
	u, err := url.Parse(s)
	if err != nil {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		return []netip.AddrPort{netip.AddrPortFrom(a.Unmap(), uint16(n))}
	} else if strings.EqualFold(u.Hostname(), "localhost") {
		return []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(n)), netip.AddrPortFrom(netip.IPv6Loopback(), uint16(n))}
	}
	return nil
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

// BuildStampFlag is the linker flag that stamps a build of bothy and
// bothy-supervisor made together (scripts/quickstart sets it to a value of
// its own per build): `-X BuildStampFlag=VALUE`.
const BuildStampFlag = "github.com/bothyhq/bothy/supervisor.BuildStamp"

// SupervisorFor returns the command that runs a lease's supervisor for the
// bothy binary exe: SupervisorProgram beside it, if that is an executable
// of the same build, because it holds far less memory per lease than the
// whole of bothy; else exe's own "supervisor" verb (go run, test binaries,
// a stale or unstamped program).
func SupervisorFor(exe string) []string {
	sup := filepath.Join(filepath.Dir(exe), SupervisorProgram)
	if fi, err := os.Stat(sup); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 && sameBuild(exe, sup) {
		return []string{sup}
	}
	return []string{exe, "supervisor"}
}

// sameBuild reports whether the binaries a and b were built together: the
// same module, Go version and VCS settings, and the same build stamp
// (BuildStampFlag). Module and VCS settings alone cannot tell two builds
// of one dirty tree, or two builds without VCS information, apart, so a
// binary without a stamp is never taken for another's.
func sameBuild(a, b string) bool {
	ia, err := buildinfo.ReadFile(a)
	if err != nil {
		return false
	}
	ib, err := buildinfo.ReadFile(b)
	if err != nil {
		return false
	}
	stamp := buildStamp(ia)
	return stamp != "" && stamp == buildStamp(ib) && ia.Main.Path == ib.Main.Path && buildID(ia) == buildID(ib)
}

// buildStamp returns the value that the build's linker flags gave
// BuildStampFlag, or "".
func buildStamp(bi *debug.BuildInfo) string {
	for _, s := range bi.Settings {
		if s.Key != "-ldflags" {
			continue
		}
		f := strings.Fields(s.Value)
		for i, arg := range f {
			if arg == "-X" && i+1 < len(f) {
				arg = f[i+1]
			} else if v, ok := strings.CutPrefix(arg, "-X="); ok {
				arg = v
			}
			if v, ok := strings.CutPrefix(arg, BuildStampFlag+"="); ok {
				return v
			}
		}
	}
	return ""
}

// buildID names a build by its Go version, module version and VCS
// settings.
func buildID(bi *debug.BuildInfo) string {
	id := bi.GoVersion + " " + bi.Main.Version
	for _, s := range bi.Settings {
		if strings.HasPrefix(s.Key, "vcs.") {
			id += " " + s.Key + "=" + s.Value
		}
	}
	return id
}

// Defaults of HTTPOptions.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout       = 30 * time.Second
	DefaultBodyMinRate       = 64 << 10 // bytes per second
	DefaultIdleTimeout       = 2 * time.Minute
)

// HTTPOptions configure NewHTTPServer. Zero values take the defaults.
type HTTPOptions struct {
	// ReadHeaderTimeout bounds the reading of a request's headers.
	ReadHeaderTimeout time.Duration
	// BodyTimeout and BodyMinRate bound the reading of a request's body:
	// it must arrive within BodyTimeout plus one second for every
	// BodyMinRate bytes read, else the connection is closed. A file upload
	// at a fair rate is never cut, and a connection trickling a body is
	// not kept for long.
	BodyTimeout time.Duration
	BodyMinRate int64
	// IdleTimeout closes a kept-alive connection that sends no request.
	IdleTimeout time.Duration
	Logger      *slog.Logger
}

// NewHTTPServer returns the HTTP server of handler h, with timeouts on
// reading requests. There is no timeout on reading as a whole nor on
// writing: the timeout on a body is lifted once it is read, so that long
// polls and event streams outlive it.
func NewHTTPServer(h http.Handler, opts HTTPOptions) *http.Server {
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.BodyMinRate <= 0 {
		opts.BodyMinRate = DefaultBodyMinRate
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &http.Server{
		Handler:           bodyDeadline(h, opts.BodyTimeout, opts.BodyMinRate),
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		IdleTimeout:       opts.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}
}

// bodyDeadline sets a read deadline on the connection of each request that
// has a body, moves it on as the body arrives, and lifts it at the body's
// end. (http.Server.ReadTimeout would also bound the rest of a long poll:
// its expiry ends the request's context.)
func bodyDeadline(h http.Handler, timeout time.Duration, rate int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		b := &deadlineBody{ReadCloser: r.Body, rc: http.NewResponseController(w), start: time.Now(), timeout: timeout, rate: rate}
		if err := b.rc.SetReadDeadline(b.start.Add(timeout)); err == nil {
			r.Body = b
		}
		h.ServeHTTP(w, r)
	})
}

type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	start   time.Time
	timeout time.Duration
	rate    int64
	n       int64 // bytes read
	done    bool  // the deadline is lifted
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if b.done {
		return n, err
	} else if err == io.EOF {
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	} else if err == nil && n > 0 {
		allowed := b.timeout + time.Duration(float64(b.n)/float64(b.rate)*float64(time.Second))
		b.rc.SetReadDeadline(b.start.Add(allowed))
	}
	return n, err
}

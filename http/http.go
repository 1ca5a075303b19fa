// Package http is bothy's public API v1 over HTTP: a Server that serves
// computers, their files, revisions and commands as JSON, and commands'
// events as server-sent events (see docs/api.md and the OpenAPI document at
// /v1/openapi.json), and a Client that implements the same operations, and
// bothy.FileService, over HTTP.
//
// Every route but /healthz, /readyz, /v1/openapi.json and /v1/receipts/key needs a
// bearer token, which resolves to a principal {tenant, owner, scopes}; each
// route names the scope it needs. A token acts on its owner's computers, and
// their commands and leases, unless it holds computers:any; another owner's
// computer, like another tenant's, is not found, never forbidden.
package http

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	nethttp "net/http"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
)

// Defaults of Options.
const (
	DefaultMaxFileSize = 1 << 30  // largest body of a file write
	DefaultMaxOpsSize  = 64 << 20 // largest body of a batch of file operations
	DefaultMaxJSONSize = 1 << 20  // largest body of any other JSON request
	// DefaultMaxRunSize is the largest body of a run request: stdin and
	// argv may each reach 1 MiB, and JSON escaping can grow them sixfold.
	DefaultMaxRunSize = 16 << 20
	// DefaultMaxOps is the most operations of a batch, as in package
	// workspace.
	DefaultMaxOps = 1000
	// DefaultTokenRecheck is how often an open event stream resolves its
	// token again, so that a stream ends soon after its token is revoked
	// or expires.
	DefaultTokenRecheck = 5 * time.Second
)

// Options configure a Server. Zero values take the defaults.
type Options struct {
	// Profiles lists the profiles a computer may be created with; default
	// ["standard"]. A request naming another profile is EINVALID: the
	// server never falls back to a different one.
	Profiles    []string
	MaxFileSize int64
	MaxOpsSize  int64
	MaxJSONSize int64
	MaxRunSize  int64
	// MaxOps is the most operations of a batch (default DefaultMaxOps): a
	// batch is refused as soon as one more is decoded.
	MaxOps int
	// Budget bounds the bytes of JSON bodies being read at once; default
	// a budget of DefaultBudget bytes for this server alone.
	Budget *Budget
	// TokenRecheck is how often an open event stream resolves its token
	// again (one store lookup per stream each time); default
	// DefaultTokenRecheck. A stream whose token no longer resolves ends
	// with an "error" event of code unauthorized.
	TokenRecheck time.Duration
	// Compute runs commands and computers. Without it the command routes
	// that need a runtime answer 503 unavailable, stop and destroy change
	// only the stored computer, and event streams end after the stored
	// events.
	Compute bothy.ComputeService
	// Receipts serves receipts, issuing one that is missing, and publishes
	// their key. Without it the receipt routes serve stored receipts only,
	// and the key route answers 503 unavailable.
	Receipts bothy.ReceiptIssuer
	// Checks are GET /readyz's checks beyond the store's own (a store with
	// a Ping method, such as sqldb.DB, is checked first).
	Checks []Check
	Logger *slog.Logger // default slog.Default()
}

// Server serves the public API over a Store, a FileService and, if
// Options.Compute is set, a ComputeService.
type Server struct {
	store   bothy.Store
	files   bothy.FileService
	compute bothy.ComputeService
	opts    Options
	log     *slog.Logger
	mux     *nethttp.ServeMux
}

// NewServer returns a server for store, whose computers' files are served by
// files (package workspace for cold computers).
func NewServer(store bothy.Store, files bothy.FileService, opts Options) *Server {
	if len(opts.Profiles) == 0 {
		opts.Profiles = []string{"standard"}
	}
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = DefaultMaxFileSize
	}
	if opts.MaxOpsSize <= 0 {
		opts.MaxOpsSize = DefaultMaxOpsSize
	}
	if opts.MaxJSONSize <= 0 {
		opts.MaxJSONSize = DefaultMaxJSONSize
	}
	if opts.MaxRunSize <= 0 {
		opts.MaxRunSize = DefaultMaxRunSize
	}
	if opts.MaxOps <= 0 {
		opts.MaxOps = DefaultMaxOps
	}
	if opts.TokenRecheck <= 0 {
		opts.TokenRecheck = DefaultTokenRecheck
	}
	if opts.Budget == nil {
		opts.Budget = NewBudget(DefaultBudget)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{store: store, files: files, compute: opts.Compute, opts: opts, log: opts.Logger, mux: nethttp.NewServeMux()}
	for _, rt := range s.routes() {
		s.mux.Handle(rt.Method+" "+rt.Pattern, s.handler(rt))
	}
	s.mux.HandleFunc("/", func(w nethttp.ResponseWriter, r *nethttp.Request) {
		s.writeError(w, r, bothy.Errorf(bothy.ENOTFOUND, "no route for %s %s", r.Method, r.URL.Path))
	})
	return s
}

// ServeHTTP implements net/http.Handler.
func (s *Server) ServeHTTP(w nethttp.ResponseWriter, r *nethttp.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, status: nethttp.StatusOK}
	defer func() {
		if v := recover(); v != nil {
			if v == nethttp.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("http panic", "method", r.Method, "path", r.URL.Path, "panic", v)
			if !sw.wrote {
				s.writeError(sw, r, bothy.Errorf(bothy.EINTERNAL, "panic"))
			}
		}
		s.log.Debug("http request", "method", r.Method, "path", r.URL.Path, "status", sw.status, "duration", time.Since(start))
	}()
	if hasDotElem(r.URL.EscapedPath()) {
		// The mux would redirect to the cleaned path, which for a file
		// route names another file; an API refuses instead.
		s.writeError(sw, r, bothy.Errorf(bothy.EINVALIDPATH, "URL path %q holds a '.' or '..' element", r.URL.Path))
		return
	}
	s.mux.ServeHTTP(sw, r)
}

// hasDotElem reports whether an escaped URL path has a "." or ".." element.
func hasDotElem(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == "." || e == ".." {
			return true
		}
	}
	return false
}

// Route is one route of the API: a method, a net/http pattern and the scope
// it needs ("" for none).
type Route struct {
	Method  string
	Pattern string
	Scope   string
	handle  func(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error
}

// Routes returns the route table, from which the server registers its
// handlers; the OpenAPI document must describe exactly these routes.
func (s *Server) Routes() []Route { return s.routes() }

func (s *Server) routes() []Route {
	const (
		cr, cw = bothy.ScopeComputersRead, bothy.ScopeComputersWrite
		fr, fw = bothy.ScopeFilesRead, bothy.ScopeFilesWrite
		c      = "/v1/computers/{id}"
		cmd    = "/v1/commands/{id}"
	)
	return []Route{
		{"GET", "/healthz", "", s.handleHealth},
		{"GET", "/readyz", "", s.handleReady},
		{"GET", "/v1/openapi.json", "", s.handleOpenAPI},

		{"POST", "/v1/computers", cw, s.handleCreateComputer},
		{"GET", "/v1/computers", cr, s.handleListComputers},
		{"GET", c, cr, s.handleGetComputer},
		{"POST", c + "/stop", cw, s.handleStopComputer},
		{"DELETE", c, cw, s.handleDestroyComputer},
		{"GET", c + "/revisions", cr, s.handleListRevisions},
		{"POST", c + "/checkpoint", cw, s.handleCheckpoint},

		{"POST", c + "/commands", cw, s.handleRunCommand},
		{"GET", c + "/commands", cr, s.handleListCommands},
		{"GET", cmd, cr, s.handleGetCommand},
		{"GET", cmd + "/events", cr, s.handleCommandEvents},
		{"POST", cmd + "/cancel", cw, s.handleCancelCommand},

		{"GET", "/v1/receipts/key", "", s.handleReceiptKey},
		{"GET", cmd + "/receipt", cr, s.handleCommandReceipt},
		{"GET", "/v1/leases/{id}/receipt", cr, s.handleLeaseReceipt},

		{"GET", c + "/files/{path...}", fr, s.handleReadFile},
		{"PUT", c + "/files/{path...}", fw, s.handleWriteFile},
		{"GET", c + "/fs/list", fr, s.handleList},
		{"GET", c + "/fs/stat", fr, s.handleStat},
		{"GET", c + "/fs/lstat", fr, s.handleLstat},
		{"GET", c + "/fs/readlink", fr, s.handleReadlink},
		{"GET", c + "/fs/glob", fr, s.handleGlob},
		{"POST", c + "/fs/grep", fr, s.handleGrep},
		{"POST", c + "/fs/mkdir", fw, s.handleMkdir},
		{"POST", c + "/fs/rm", fw, s.handleRemove},
		{"POST", c + "/fs/rename", fw, s.handleRename},
		{"POST", c + "/fs/symlink", fw, s.handleSymlink},
		{"POST", c + "/fs/chmod", fw, s.handleChmod},
		{"POST", c + "/fs/ops", fw, s.handleOps},
	}
}

// handler authenticates and authorises a request for rt (its scope, then
// the owner of the computer its {id} names), then runs it and writes its
// error, if any.
func (s *Server) handler(rt Route) nethttp.Handler {
	kind := resourceOf(rt.Pattern)
	if kind != resourceNone && rt.Scope == "" {
		panic("http: route " + rt.Pattern + " names a resource but needs no token")
	}
	return nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		var p *bothy.Principal
		if rt.Scope != "" {
			var err error
			if p, err = s.authenticate(r); err != nil {
				s.writeError(w, r, err)
				return
			} else if !p.Can(rt.Scope) {
				s.writeError(w, r, bothy.Errorf(bothy.EFORBIDDEN, "this token lacks the scope %q", rt.Scope))
				return
			} else if err := s.checkOwner(r.Context(), kind, r.PathValue("id"), p); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		if err := rt.handle(w, r, p); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// authenticate resolves the bearer token of r.
func (s *Server) authenticate(r *nethttp.Request) (*bothy.Principal, error) {
	h := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return nil, bothy.Errorf(bothy.EUNAUTHORIZED, "an Authorization: Bearer token is required")
	}
	return s.store.ResolveToken(r.Context(), strings.TrimSpace(secret))
}

func (s *Server) handleHealth(w nethttp.ResponseWriter, r *nethttp.Request, _ *bothy.Principal) error {
	writeJSON(w, nethttp.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// newID returns prefix and 12 random bytes in hex.
func newID(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// statusWriter records the status of a response and whether it began.
type statusWriter struct {
	nethttp.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets net/http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() nethttp.ResponseWriter { return w.ResponseWriter }

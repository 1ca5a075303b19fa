package main

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	nethttp "net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/cmd/internal/providers"
	"github.com/bothyhq/bothy/control"
	"github.com/bothyhq/bothy/hostcache"
	"github.com/bothyhq/bothy/receipt"
	"github.com/bothyhq/bothy/secretfile"
	bserver "github.com/bothyhq/bothy/server"
)

// shutdownGrace is how long a stopping server lets requests finish.
const shutdownGrace = 10 * time.Second

// faultHook is the control plane's fault-injection hook: nil in the bothy
// binary, set by fault_test.go in the test binary that the end-to-end
// tests run as bothy.
var faultHook func(point string)

func runServe(ctx context.Context, args []string) error {
	o, err := parseServe(args)
	if err != nil {
		return err
	}
	e, err := openEnv(ctx, o.cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	ln, url, key, err := o.listen(ctx, e)
	if err != nil {
		return err
	}
	s, err := o.newServer(e, key, ln.Addr())
	if err != nil {
		ln.Close()
		return err
	}
	return o.serve(ctx, ln, url, s, e)
}

// serveOptions is what `bothy serve`'s flags ask for.
type serveOptions struct {
	cfg        config
	rc         runConfig
	addr       string
	receiptKey string
	// TLS: a certificate and key, or a self-signed CA in DATA/tls.
	tlsCert, tlsKey, tlsHosts string
	tlsSelfSigned             bool
	agentTLS                  *tls.Config // the in-process agent's, pinned to the served certificate
	tlsCA                     string      // the self-signed CA's certificate file, printed as BOTHY_CA
	policy                    *bothy.Policy
	log                       *slog.Logger
}

// parseServe parses serve's flags, including the policy they make.
func parseServe(args []string) (*serveOptions, error) {
	o := &serveOptions{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&o.addr, "listen", "127.0.0.1:8080", "address to listen on")
	debugLog := fs.Bool("debug", false, "log every request")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain) file, with --tls-key")
	fs.StringVar(&o.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	fs.BoolVar(&o.tlsSelfSigned, "tls-self-signed", false, "serve HTTPS with a certificate from a CA made in DATA/tls on first start (its ca.pem goes to agents and clients: --ca-file, BOTHY_CA)")
	fs.StringVar(&o.tlsHosts, "tls-hosts", "", "with --tls-self-signed, more names and addresses (comma-separated) the certificate is for, besides loopback, the host name and the listening addresses")
	fs.StringVar(&o.receiptKey, "receipt-key", "", "Ed25519 key that signs receipts: PEM PKCS #8 or a 32-byte seed, mode 0600 (default: DATA/receipt.key, created on first start)")
	o.rc.register(fs)
	args, err := parseFlags(fs, &o.cfg, args)
	if err != nil {
		return nil, err
	} else if len(args) != 0 {
		return nil, bothy.Errorf(bothy.EINVALID, "usage: bothy serve [--data DIR] [--listen ADDR] [--store URL] [--blobs URL] [--receipt-key FILE]")
	}
	level := slog.LevelInfo
	if *debugLog {
		level = slog.LevelDebug
	}
	o.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if o.policy, err = o.rc.policy(fs); err != nil {
		return nil, err
	}
	return o, nil
}

// listen makes sure of the admin token and the receipt key, listens, and
// prints the BOTHY_URL and BOTHY_TOKEN lines.
func (o *serveOptions) listen(ctx context.Context, e *env) (net.Listener, string, ed25519.PrivateKey, error) {
	tokenPath := filepath.Join(o.cfg.data, "admin.token")
	secret, created, err := e.adminToken(ctx, tokenPath, o.log)
	if err != nil {
		return nil, "", nil, err
	}
	key, err := loadReceiptKey(o.receiptKey, o.cfg.data, o.log)
	if err != nil {
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("listen: %w", err)
	}
	addr := ln.Addr()
	scheme := "http://"
	if cert, ok, err := o.serveTLS(ln); err != nil {
		ln.Close()
		return nil, "", nil, err
	} else if ok {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		o.agentTLS, scheme = pinned(cert), "https://"
	} else if tcp, isTCP := addr.(*net.TCPAddr); isTCP && !tcp.IP.IsLoopback() {
		o.log.Warn("serving plain HTTP beyond loopback: tokens, lease credentials and secret values cross the network in clear text; use --tls-cert/--tls-key or --tls-self-signed", "listen", addr.String())
	}
	url := scheme + displayAddr(addr)
	fmt.Printf("export BOTHY_URL=%s\n", url)
	if created {
		fmt.Printf("export BOTHY_TOKEN=%s\n", secret)
	} else {
		fmt.Printf("export BOTHY_TOKEN=\"$(cat '%s')\"\n", strings.ReplaceAll(tokenPath, "'", `'\''`))
	}
	if o.tlsCA != "" {
		fmt.Printf("export BOTHY_CA=%s\n", shellQuote(o.tlsCA))
	}
	return ln, url, key, nil
}

// newServer assembles the server: control plane, API and, unless
// --no-agent, the in-process agent with this host's providers, whose
// egress broker denies addr, where the API listens.
func (o *serveOptions) newServer(e *env, key ed25519.PrivateKey, addr net.Addr) (*bserver.Server, error) {
	// The in-process agent's token lives in memory only, for this
	// process: agents on other hosts enrol with a join token (bothy admin
	// agent join) and hold expiring tokens of their own.
	agentToken := newAgentSecret()
	if old := filepath.Join(o.cfg.data, "agent.token"); fileExists(old) {
		o.log.Warn("DATA/agent.token is no longer used and is removed: an agent on another host enrols with a join token (bothy admin agent join --id ID)", "path", old)
		if err := os.Remove(old); err != nil {
			return nil, err
		}
	}
	sc := bserver.Config{
		Data: o.cfg.data, Store: e.store, Blobs: e.blobs, Policy: o.policy, AgentToken: agentToken, Logger: o.log,
		ReceiptKey: key, Version: buildVersion(), Listeners: ownListeners(addr), AgentTLS: o.agentTLS,
		Control: control.Config{IdleTimeout: o.rc.idle, MaxLifetime: o.rc.lifetime, Fault: faultHook,
			Secrets: secretfile.NewStore(filepath.Join(o.cfg.data, "secrets"))},
	}
	if !o.rc.noAgent {
		var err error
		if sc.SupervisorCommand, err = bserver.Exe(); err != nil {
			return nil, err
		}
		sc.Providers, sc.AgentID, sc.Workspace = providers.All(), agentID(), hostcache.Mode(o.rc.workspace)
	}
	return bserver.New(sc)
}

// serve serves the API on ln and runs the control plane until ctx is
// done. Then it stops: the server keeps serving while the in-process
// agent drains (the stops in flight finish, bserver.Server.Run), and
// the HTTP server is shut down once the control plane has stopped,
// letting requests finish; all within shutdownGrace of the signal.
func (o *serveOptions) serve(ctx context.Context, ln net.Listener, url string, s *bserver.Server, e *env) error {
	log := o.log
	srv := bserver.NewHTTPServer(s.Handler(), bserver.HTTPOptions{Logger: log})
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	runc := make(chan error, 1)
	go func() { runc <- s.Run(runCtx, url) }()
	log.Info("bothy serve started", "url", url, "data", o.cfg.data, "tenant", e.tenant.ID, "profiles", o.policy.Profiles)
	var runErr error
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case runErr = <-runc:
		if runErr == nil {
			runErr = errors.New("stopped")
		}
		runErr = fmt.Errorf("control plane: %w", runErr)
	case <-ctx.Done():
	}
	log.Info("bothy serve stopping")
	stopRun()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if runErr == nil {
		select {
		case err := <-runc:
			if err != nil {
				log.Warn("control plane", "err", err)
			}
		case <-sctx.Done():
		}
	}
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, nethttp.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	if runErr != nil {
		return runErr
	}
	log.Info("bothy serve stopped")
	return nil
}

// adminToken returns the admin token kept at path, creating it (and the
// file, mode 0600) when the file is missing or its token no longer
// resolves to an admin of the environment's tenant. created reports a new
// token, whose secret the caller shows once.
func (e *env) adminToken(ctx context.Context, path string, log *slog.Logger) (secret string, created bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil {
		// A token file others can read is tightened, not trusted as it is.
		if fi, serr := os.Stat(path); serr == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("admin token file was readable by others; setting mode 0600", "path", path, "mode", fi.Mode().Perm())
			if err := os.Chmod(path, 0o600); err != nil {
				return "", false, fmt.Errorf("protect admin token: %w", err)
			}
		}
		secret = strings.TrimSpace(string(b))
		p, err := e.store.ResolveToken(ctx, secret)
		if err == nil && p.TenantID == e.tenant.ID && p.Can(bothy.ScopeAdmin) {
			return secret, false, nil
		} else if err != nil && bothy.ErrorCode(err) != bothy.EUNAUTHORIZED {
			return "", false, fmt.Errorf("check admin token: %w", err)
		}
		log.Warn("admin token file holds no valid admin token; replacing it", "path", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", false, fmt.Errorf("read admin token: %w", err)
	}
	_, secret, err = e.store.CreateToken(ctx, e.tenant.ID, "admin", []string{bothy.ScopeAdmin}, time.Time{})
	if err != nil {
		return "", false, fmt.Errorf("create admin token: %w", err)
	}
	if err := writeSecret(path, secret); err != nil {
		return "", false, err
	}
	return secret, true, nil
}

// writeSecret replaces the file at path with secret, mode 0600, atomically.
func writeSecret(path, secret string) error {
	tmp := path + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write admin token: %w", err)
	}
	_, err = f.WriteString(secret + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write admin token: %w", err)
	}
	return nil
}

// ownListeners returns the address and port a TCP listener is bound to
// (an unspecified address stands for every address of the host), for the
// egress broker to deny.
func ownListeners(a net.Addr) []netip.AddrPort {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return nil
	}
	ap := tcp.AddrPort()
	if !ap.Addr().IsValid() {
		return []netip.AddrPort{netip.AddrPortFrom(netip.IPv6Unspecified(), ap.Port())}
	}
	return []netip.AddrPort{netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
}

// displayAddr returns a dialable form of a listening address: an
// unspecified host (0.0.0.0, ::) becomes the loopback address.
func displayAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	if tcp.IP == nil || tcp.IP.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
	}
	return tcp.String()
}

// loadReceiptKey reads the receipt signing key at path, or, with no path,
// at DATA/receipt.key, creating that on first start.
func loadReceiptKey(path, data string, log *slog.Logger) (ed25519.PrivateKey, error) {
	if path != "" {
		key, err := receipt.ReadKey(path)
		if err == nil {
			log.Info("receipt key", "path", path, "key_id", receipt.KeyID(key.Public().(ed25519.PublicKey)))
		}
		return key, err
	}
	path = filepath.Join(data, "receipt.key")
	key, created, err := receipt.LoadOrCreateKey(path)
	if err != nil {
		return nil, err
	}
	log.Info("receipt key", "path", path, "created", created, "key_id", receipt.KeyID(key.Public().(ed25519.PublicKey)))
	return key, nil
}

// buildVersion names this build: the module version and, when the build
// recorded it, the VCS revision.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v += "+" + s.Value
		}
	}
	return v
}

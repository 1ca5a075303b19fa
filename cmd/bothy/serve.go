package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	nethttp "net/http"
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
	var cfg config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on")
	debug := fs.Bool("debug", false, "log every request")
	receiptKey := fs.String("receipt-key", "", "Ed25519 key that signs receipts: PEM PKCS #8 or a 32-byte seed, mode 0600 (default: DATA/receipt.key, created on first start)")
	var rc runConfig
	rc.register(fs)
	args, err := parseFlags(fs, &cfg, args)
	if err != nil {
		return err
	} else if len(args) != 0 {
		return bothy.Errorf(bothy.EINVALID, "usage: bothy serve [--data DIR] [--listen ADDR] [--store URL] [--blobs URL] [--receipt-key FILE]")
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	policy, err := rc.policy(fs)
	if err != nil {
		return err
	}
	e, err := openEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	tokenPath := filepath.Join(cfg.data, "admin.token")
	secret, created, err := e.adminToken(ctx, tokenPath, log)
	if err != nil {
		return err
	}
	key, err := loadReceiptKey(*receiptKey, cfg.data, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	url := "http://" + displayAddr(ln.Addr())
	fmt.Printf("export BOTHY_URL=%s\n", url)
	if created {
		fmt.Printf("export BOTHY_TOKEN=%s\n", secret)
	} else {
		fmt.Printf("export BOTHY_TOKEN=\"$(cat '%s')\"\n", strings.ReplaceAll(tokenPath, "'", `'\''`))
	}

	agentToken, err := readOrCreateSecret(filepath.Join(cfg.data, "agent.token"))
	if err != nil {
		ln.Close()
		return err
	}
	sc := bserver.Config{
		Data: cfg.data, Store: e.store, Blobs: e.blobs, Policy: policy, AgentToken: agentToken, Logger: log,
		ReceiptKey: key, Version: buildVersion(),
		Control: control.Config{IdleTimeout: rc.idle, MaxLifetime: rc.lifetime, Fault: faultHook,
			Secrets: secretfile.NewStore(filepath.Join(cfg.data, "secrets"))},
	}
	if !rc.noAgent {
		if sc.SupervisorCommand, err = bserver.Exe(); err != nil {
			ln.Close()
			return err
		}
		sc.Providers, sc.AgentID, sc.Workspace = providers.All(), agentID(), hostcache.Mode(rc.workspace)
	}
	s, err := bserver.New(sc)
	if err != nil {
		ln.Close()
		return err
	}
	srv := &nethttp.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go func() {
		if err := s.Run(runCtx, url); err != nil {
			errc <- fmt.Errorf("control plane: %w", err)
		}
	}()
	log.Info("bothy serve started", "url", url, "data", cfg.data, "tenant", e.tenant.ID, "profiles", policy.Profiles)
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("bothy serve stopping")
	stopRun()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, nethttp.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
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

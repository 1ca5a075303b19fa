package server_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/postgres"
	"github.com/bothyhq/bothy/postgres/pgtest"
	"github.com/bothyhq/bothy/server"
)

// tcpProxy forwards a loopback port to a server; down makes the port refuse
// connections and cuts the open ones, as a stopped server does, and up
// serves it again.
type tcpProxy struct {
	t      *testing.T
	addr   string // the proxy's address, which stays the same across down and up
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{t: t, addr: "127.0.0.1:0", target: target}
	p.up()
	t.Cleanup(p.down)
	return p
}

func (p *tcpProxy) up() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(s, c); s.Close() })
			p.wg.Go(func() { io.Copy(c, s); c.Close() })
		}
	})
}

func (p *tcpProxy) down() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// TestServer_StoreUnavailable serves the API on a PostgreSQL store whose
// server goes away (a proxy in front of it stops listening and cuts its
// connections, so the shared server keeps running): requests answer 503
// unavailable with Retry-After and /readyz is not ready; once the server
// is back, both work again.
func TestServer_StoreUnavailable(t *testing.T) {
	dbURL := pgtest.URL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.addr
	store, err := postgres.Open(t.Context(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx := t.Context()
	tenant, err := bothy.NewTenant("down", "down")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateTenant(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	_, token, err := store.CreateToken(ctx, tenant.ID, "down", []string{bothy.ScopeAdmin}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := localblob.Open(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Data: t.TempDir(), Store: store, Blobs: blobs,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	get := func(path string) (int, nethttp.Header, string) {
		t.Helper()
		req, err := nethttp.NewRequestWithContext(ctx, "GET", hs.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := nethttp.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e struct{ Error struct{ Code string } }
		json.Unmarshal(b, &e)
		return resp.StatusCode, resp.Header, e.Error.Code + " " + string(b)
	}
	if st, _, body := get("/v1/computers"); st != 200 {
		t.Fatalf("GET /v1/computers with the store up: %d %s", st, body)
	}
	if st, _, body := get("/readyz"); st != 200 {
		t.Errorf("GET /readyz with the store up: %d %s", st, body)
	}

	proxy.down()
	st, h, body := get("/v1/computers")
	if st != nethttp.StatusServiceUnavailable || h.Get("Retry-After") == "" {
		t.Errorf("GET /v1/computers with the store down: %d Retry-After=%q %s; want 503 unavailable with Retry-After", st, h.Get("Retry-After"), body)
	} else if code := body[:len(bothy.EUNAVAILABLE)]; code != bothy.EUNAVAILABLE {
		t.Errorf("GET /v1/computers with the store down: code %q, want %q", code, bothy.EUNAVAILABLE)
	}
	if st, _, body := get("/readyz"); st != nethttp.StatusServiceUnavailable {
		t.Errorf("GET /readyz with the store down: %d %s; want 503", st, body)
	}

	proxy.up()
	if st, _, body := get("/v1/computers"); st != 200 {
		t.Errorf("GET /v1/computers with the store back: %d %s", st, body)
	}
	if st, _, body := get("/readyz"); st != 200 {
		t.Errorf("GET /readyz with the store back: %d %s", st, body)
	}
}

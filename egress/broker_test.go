package egress_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/egress"
	"github.com/bothyhq/bothy/testenv"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// echoServer accepts TCP connections on 127.0.0.1 and echoes what they send.
func echoServer(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { io.Copy(c, c); c.Close() })
		}
	})
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// httpOrigin is an HTTP server on 127.0.0.1 that says hello to GET and
// answers a POST with the length of its body.
func httpOrigin(t *testing.T) netip.AddrPort {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(originHandler))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).AddrPort()
}

func originHandler(w http.ResponseWriter, r *http.Request) {
	n, _ := io.Copy(io.Discard, r.Body)
	if r.Method == http.MethodPost {
		fmt.Fprintf(w, "got %d bytes", n)
		return
	}
	fmt.Fprint(w, "hello from origin")
}

type brokerEnv struct {
	b     *egress.Broker
	proxy netip.AddrPort
	res   *fakeResolver
	logs  *testenv.Buffer
}

// startBroker serves lease "lease-1" on 127.0.0.1 with policy.
func startBroker(t *testing.T, opt egress.BrokerOptions, policy bothy.EgressPolicy) *brokerEnv {
	t.Helper()
	env := &brokerEnv{logs: &testenv.Buffer{}}
	if opt.Resolver == nil {
		env.res = newResolver()
		opt.Resolver = env.res
	}
	opt.Logger = slog.New(slog.NewTextHandler(env.logs, nil))
	env.b = egress.NewBroker(opt)
	t.Cleanup(env.b.Shutdown)
	var err error
	if env.proxy, err = env.b.Serve("lease-1", netip.MustParseAddrPort("127.0.0.1:0"), policy); err != nil {
		t.Fatal(err)
	}
	return env
}

func allowlist(patterns ...string) bothy.EgressPolicy {
	return bothy.EgressPolicy{Mode: bothy.EgressAllowlist, Allow: patterns}
}

// connect sends CONNECT dest to the proxy and returns the connection, the
// status and, unless it is 200, the body.
func connect(t *testing.T, proxy netip.AddrPort, dest string) (net.Conn, int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy.String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return connectOn(t, c, dest)
}

func connectOn(t *testing.T, c net.Conn, dest string) (net.Conn, int, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Time{})
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return c, resp.StatusCode, string(b)
	}
	if br.Buffered() > 0 {
		t.Fatalf("%d unexpected bytes after the CONNECT answer", br.Buffered())
	}
	return c, resp.StatusCode, ""
}

// echo writes payload on c and reads it back.
func echo(t *testing.T, c net.Conn, payload []byte) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	go c.Write(payload)
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	} else if !bytes.Equal(got, payload) {
		t.Fatal("the echo differs from the payload")
	}
}

// get fetches u through the proxy as a plain-HTTP proxy request.
func get(t *testing.T, proxy netip.AddrPort, method, u string, body []byte) (int, string) {
	t.Helper()
	pu, _ := url.Parse("http://" + proxy.String())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func wantDenied(t *testing.T, status int, body string, wantStatus int, want string) {
	t.Helper()
	if status != wantStatus || !strings.HasPrefix(body, "bothy egress: ") || !strings.Contains(body, want) {
		t.Fatalf("got %d %q, want %d and a body with %q", status, body, wantStatus, want)
	}
}

func TestBroker_Serve(t *testing.T) {
	t.Run("ConnectAllowed", func(t *testing.T) {
		origin := echoServer(t)
		env := startBroker(t, egress.BrokerOptions{AllowPrivate: loopback}, allowlist(fmt.Sprintf("origin.test:%d", origin.Port())))
		env.res.set("origin.test", "127.0.0.1")
		c, status, body := connect(t, env.proxy, fmt.Sprintf("origin.test:%d", origin.Port()))
		if status != http.StatusOK {
			t.Fatal(status, body)
		}
		payload := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
		echo(t, c, payload)
		if n := env.b.Bytes("lease-1"); n < 2*int64(len(payload)) {
			t.Fatalf("Bytes = %d after a %d-byte echo", n, len(payload))
		}
	})
	t.Run("PlainHTTPAllowed", func(t *testing.T) {
		origin := httpOrigin(t)
		env := startBroker(t, egress.BrokerOptions{AllowPrivate: loopback}, allowlist("*.origin.test:*"))
		env.res.set("www.origin.test", "127.0.0.1")
		u := fmt.Sprintf("http://www.origin.test:%d/hello", origin.Port())
		if status, body := get(t, env.proxy, http.MethodGet, u, nil); status != 200 || body != "hello from origin" {
			t.Fatal(status, body)
		}
		payload := bytes.Repeat([]byte("x"), 300<<10)
		before := env.b.Bytes("lease-1")
		if status, body := get(t, env.proxy, http.MethodPost, u, payload); status != 200 || body != fmt.Sprintf("got %d bytes", len(payload)) {
			t.Fatal(status, body)
		}
		if n := env.b.Bytes("lease-1") - before; n < int64(len(payload)) {
			t.Fatalf("Bytes grew by %d for a %d-byte body", n, len(payload))
		}
	})
	t.Run("HTTPSThroughConnect", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.HandlerFunc(originHandler))
		t.Cleanup(srv.Close)
		port := srv.Listener.Addr().(*net.TCPAddr).Port
		env := startBroker(t, egress.BrokerOptions{AllowPrivate: loopback}, allowlist(fmt.Sprintf("origin.test:%d", port)))
		env.res.set("origin.test", "127.0.0.1")
		tr := srv.Client().Transport.(*http.Transport).Clone()
		pu, _ := url.Parse("http://" + env.proxy.String())
		tr.Proxy = http.ProxyURL(pu)
		tr.TLSClientConfig = &tls.Config{RootCAs: tr.TLSClientConfig.RootCAs, ServerName: "example.com"}
		resp, err := (&http.Client{Transport: tr}).Get(fmt.Sprintf("https://origin.test:%d/", port))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if string(b) != "hello from origin" {
			t.Fatalf("%q", b)
		}
	})
	t.Run("ModeAll", func(t *testing.T) {
		origin := echoServer(t)
		env := startBroker(t, egress.BrokerOptions{AllowPrivate: loopback}, bothy.EgressPolicy{Mode: bothy.EgressAll})
		env.res.set("anything.test", "127.0.0.1")
		c, status, body := connect(t, env.proxy, fmt.Sprintf("anything.test:%d", origin.Port()))
		if status != 200 {
			t.Fatal(status, body)
		}
		echo(t, c, []byte("ping"))
	})
	t.Run("ResolvedOnce", func(t *testing.T) {
		// The broker dials the address it checked; it never asks the
		// resolver again, so a rebinding answer cannot redirect it.
		origin := echoServer(t)
		env := startBroker(t, egress.BrokerOptions{AllowPrivate: loopback}, allowlist("origin.test:*"))
		env.res.set("origin.test", "127.0.0.1")
		c, status, _ := connect(t, env.proxy, fmt.Sprintf("origin.test:%d", origin.Port()))
		if status != 200 {
			t.Fatal(status)
		}
		echo(t, c, []byte("ping"))
		if n := env.res.count(); n != 1 {
			t.Fatalf("%d lookups for one tunnel", n)
		}
	})
}

func TestBroker_Serve_Denied(t *testing.T) {
	origin := echoServer(t)
	port := origin.Port()
	t.Run("NotOnAllowlist", func(t *testing.T) {
		env := startBroker(t, egress.BrokerOptions{AllowPrivate: loopback}, allowlist(fmt.Sprintf("origin.test:%d", port), "*.wild.test:443"))
		env.res.set("origin.test", "127.0.0.1")
		env.res.set("other.test", "127.0.0.1")
		env.res.set("wild.test", "127.0.0.1")
		for _, dest := range []string{
			fmt.Sprintf("other.test:%d", port),
			fmt.Sprintf("origin.test:%d", port+1),
			"wild.test:443", // "*.wild.test" is the subdomains only
			"a.wild.test:80",
			fmt.Sprintf("127.0.0.1:%d", port), // an IP is not the name that resolves to it
		} {
			_, status, body := connect(t, env.proxy, dest)
			wantDenied(t, status, body, 403, "denied "+dest+": not on this computer's allowlist")
		}
		status, body := get(t, env.proxy, http.MethodGet, fmt.Sprintf("http://other.test:%d/", port), nil)
		wantDenied(t, status, body, 403, "not on this computer's allowlist")
		if n := env.res.count(); n != 0 {
			t.Fatalf("%d lookups for destinations the policy refuses", n)
		}
		logs := env.logs.String()
		if !strings.Contains(logs, "lease=lease-1") || !strings.Contains(logs, "dest=other.test:") || !strings.Contains(logs, "allowlist") {
			t.Fatalf("denial not logged: %s", logs)
		}
	})
	t.Run("ModeNone", func(t *testing.T) {
		env := startBroker(t, egress.BrokerOptions{AllowPrivate: loopback}, bothy.EgressPolicy{})
		env.res.set("origin.test", "127.0.0.1")
		_, status, body := connect(t, env.proxy, fmt.Sprintf("origin.test:%d", port))
		wantDenied(t, status, body, 403, "mode none")
		status, body = get(t, env.proxy, http.MethodGet, fmt.Sprintf("http://origin.test:%d/", port), nil)
		wantDenied(t, status, body, 403, "mode none")
	})
	t.Run("ResolvesToLoopback", func(t *testing.T) {
		env := startBroker(t, egress.BrokerOptions{}, allowlist("origin.test:*"))
		env.res.set("origin.test", "127.0.0.1")
		_, status, body := connect(t, env.proxy, fmt.Sprintf("origin.test:%d", port))
		wantDenied(t, status, body, 403, "resolves to 127.0.0.1, a loopback address")
		status, body = get(t, env.proxy, http.MethodGet, fmt.Sprintf("http://origin.test:%d/", port), nil)
		wantDenied(t, status, body, 403, "resolves to 127.0.0.1, a loopback address")
	})
	t.Run("EveryAddressChecked", func(t *testing.T) {
		env := startBroker(t, egress.BrokerOptions{}, allowlist("origin.test:*"))
		env.res.set("origin.test", "198.51.100.7", "10.1.2.3")
		_, status, body := connect(t, env.proxy, "origin.test:443")
		wantDenied(t, status, body, 403, "resolves to 10.1.2.3, a private address")
	})
	t.Run("Metadata", func(t *testing.T) {
		all := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
		env := startBroker(t, egress.BrokerOptions{AllowPrivate: all}, allowlist("meta.test:80", "169.254.169.254:80", "[fd00:ec2::254]:80"))
		env.res.set("meta.test", "169.254.169.254")
		_, status, body := connect(t, env.proxy, "meta.test:80")
		wantDenied(t, status, body, 403, "resolves to 169.254.169.254, the cloud metadata address")
		status, body = get(t, env.proxy, http.MethodGet, "http://169.254.169.254/latest/meta-data/", nil)
		wantDenied(t, status, body, 403, "the cloud metadata address")
		_, status, body = connect(t, env.proxy, "[fd00:ec2::254]:80")
		wantDenied(t, status, body, 403, "the cloud metadata address")
	})
	t.Run("LeaseNetworks", func(t *testing.T) {
		// An operator's AllowPrivate that covers the lease networks does
		// not open another lease's sandbox: the pools are always denied.
		wide := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		pool := netip.MustParsePrefix("10.252.0.0/16")
		env := startBroker(t, egress.BrokerOptions{AllowPrivate: wide, LeasePools: []netip.Prefix{egress.DefaultPool, pool}},
			bothy.EgressPolicy{Mode: bothy.EgressAll})
		env.res.set("sandbox.test", "10.252.0.6")
		for _, dest := range []string{"10.200.0.6:9000", "10.252.0.6:9000", "sandbox.test:9000"} {
			_, status, body := connect(t, env.proxy, dest)
			wantDenied(t, status, body, 403, "an address of the lease networks")
		}
	})
	t.Run("OwnListeners", func(t *testing.T) {
		// An operator's AllowPrivate that covers loopback (for a dev
		// service on the host) does not open bothy's own API: api stands
		// for it, registered as the server's own listener, while origin,
		// another loopback listener, stays reachable.
		api := echoServer(t)
		all := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
		env := startBroker(t, egress.BrokerOptions{AllowPrivate: loopback, OwnListeners: []netip.AddrPort{api}},
			bothy.EgressPolicy{Mode: bothy.EgressAll})
		env.res.set("api.test", "127.0.0.1")
		const why = "an address bothy itself listens on (its API and runtime protocol)"
		_, status, body := connect(t, env.proxy, api.String())
		wantDenied(t, status, body, 403, "denied "+api.String()+": it is "+why)
		for _, dest := range []string{api.String(), fmt.Sprintf("api.test:%d", api.Port()), fmt.Sprintf("[::ffff:127.0.0.1]:%d", api.Port())} {
			_, status, body := connect(t, env.proxy, dest)
			wantDenied(t, status, body, 403, why)
		}
		status, body = get(t, env.proxy, http.MethodGet, "http://"+api.String()+"/", nil)
		wantDenied(t, status, body, 403, why)
		c, status, body := connect(t, env.proxy, origin.String())
		if status != 200 {
			t.Fatalf("CONNECT to another loopback listener: %d %q", status, body)
		}
		echo(t, c, []byte("still reachable"))
		c.Close()
		// A listener on every address (0.0.0.0 or ::) is reached through
		// every loopback address and the unspecified one: all denied, on
		// its port only.
		env = startBroker(t, egress.BrokerOptions{AllowPrivate: all, OwnListeners: []netip.AddrPort{netip.AddrPortFrom(netip.IPv4Unspecified(), api.Port())}},
			bothy.EgressPolicy{Mode: bothy.EgressAll})
		for _, host := range []string{"127.0.0.1", "127.0.0.2", "[::1]", "0.0.0.0", "[::]"} {
			dest := fmt.Sprintf("%s:%d", host, api.Port())
			_, status, body := connect(t, env.proxy, dest)
			wantDenied(t, status, body, 403, why)
		}
		c, status, body = connect(t, env.proxy, origin.String())
		if status != 200 {
			t.Fatalf("CONNECT to another port of loopback: %d %q", status, body)
		}
		echo(t, c, []byte("still reachable"))
		c.Close()
		// A listener on one address is denied on that address: the
		// unspecified destination, which the kernel sends to loopback,
		// counts as it.
		env = startBroker(t, egress.BrokerOptions{AllowPrivate: all, OwnListeners: []netip.AddrPort{api}},
			bothy.EgressPolicy{Mode: bothy.EgressAll})
		_, status, body = connect(t, env.proxy, fmt.Sprintf("0.0.0.0:%d", api.Port()))
		wantDenied(t, status, body, 403, why)
	})
	t.Run("AddressClasses", func(t *testing.T) {
		env := startBroker(t, egress.BrokerOptions{}, bothy.EgressPolicy{Mode: bothy.EgressAll})
		for dest, why := range map[string]string{
			"127.0.0.1:80":          "a loopback address",
			"[::1]:80":              "a loopback address",
			"[::ffff:127.0.0.1]:80": "a loopback address",
			"10.0.0.1:80":           "a private address",
			"172.16.0.1:80":         "a private address",
			"192.168.1.1:80":        "a private address",
			"[fd12::1]:80":          "a private address",
			"169.254.1.1:80":        "a link-local address",
			"[fe80::1]:80":          "a link-local address",
			"0.0.0.0:80":            "an unspecified address",
			"[::]:80":               "an unspecified address",
			"224.0.0.1:80":          "a multicast or broadcast address",
			"100.64.0.1:80":         "a shared (CGNAT) address",
			"169.254.169.254:80":    "the cloud metadata address",
			"[64:ff9b::a00:1]:80":   "a private address (through NAT64)",
			"[2002:7f00:1::]:80":    "a loopback address (through 6to4)",
			"240.0.0.1:80":          "a reserved address",
		} {
			_, status, body := connect(t, env.proxy, dest)
			if status != 403 || !strings.Contains(body, "it is "+why) {
				t.Errorf("%s: got %d %q, want 403 %q", dest, status, body, why)
			}
		}
	})
	t.Run("HostAddress", func(t *testing.T) {
		// A non-loopback address of this host reaches services bound to
		// 0.0.0.0; AllowPrivate cannot admit it.
		var host netip.Addr
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if x, ok := netip.AddrFromSlice(a.(*net.IPNet).IP); ok && !x.Unmap().IsLoopback() && !x.IsLinkLocalUnicast() {
				host = x.Unmap()
				break
			}
		}
		if !host.IsValid() {
			testenv.Skip(t, "this host has no non-loopback address")
		}
		all := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
		env := startBroker(t, egress.BrokerOptions{AllowPrivate: all}, bothy.EgressPolicy{Mode: bothy.EgressAll})
		_, status, body := connect(t, env.proxy, netip.AddrPortFrom(host, port).String())
		wantDenied(t, status, body, 403, "an address of this host")
	})
	t.Run("Unresolvable", func(t *testing.T) {
		env := startBroker(t, egress.BrokerOptions{}, allowlist("nowhere.test:443"))
		_, status, body := connect(t, env.proxy, "nowhere.test:443")
		wantDenied(t, status, body, 502, "cannot resolve nowhere.test")
	})
	t.Run("BadRequest", func(t *testing.T) {
		env := startBroker(t, egress.BrokerOptions{}, bothy.EgressPolicy{Mode: bothy.EgressAll})
		for _, dest := range []string{"origin.test", "origin.test:0", "origin.test:99999", "bad_-.test..x:443", "*.test:443", "[fe80::1%25eth0]:443"} {
			_, status, body := connect(t, env.proxy, dest)
			wantDenied(t, status, body, 400, "bad request")
		}
		// net/http refuses these itself, before the broker sees them.
		for _, dest := range []string{"origin.test:http", "origin test:443"} {
			if _, status, body := connect(t, env.proxy, dest); status != 400 {
				t.Errorf("%s: %d %q", dest, status, body)
			}
		}
		status, body := get(t, env.proxy, http.MethodGet, "http://origin.test:0/", nil)
		wantDenied(t, status, body, 400, "bad request")
		resp, err := http.Get("http://" + env.proxy.String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantDenied(t, resp.StatusCode, string(b), 400, "this is a proxy")
	})
}

func TestBroker_Close(t *testing.T) {
	origin := echoServer(t)
	dest := fmt.Sprintf("origin.test:%d", origin.Port())
	env := startBroker(t, egress.BrokerOptions{AllowPrivate: loopback}, allowlist(dest))
	env.res.set("origin.test", "127.0.0.1")
	c, status, _ := connect(t, env.proxy, dest)
	if status != 200 {
		t.Fatal(status)
	}
	echo(t, c, []byte("ping"))
	n := env.b.Bytes("lease-1")
	if err := env.b.Close("lease-1"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the tunnel is still open after Close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", env.proxy.String(), time.Second); err == nil {
		c.Close()
		t.Fatal("the listener still accepts after Close")
	}
	if err := env.b.Close("lease-1"); err != nil {
		t.Fatal("second Close:", err)
	}
	if got := env.b.Bytes("lease-1"); got < n {
		t.Fatalf("Bytes after Close = %d, before %d", got, n)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return err != nil && errorsAs(err, &ne) && ne.Timeout()
}

func TestBroker_Serve_Again(t *testing.T) {
	origin := echoServer(t)
	dest := fmt.Sprintf("origin.test:%d", origin.Port())
	env := startBroker(t, egress.BrokerOptions{AllowPrivate: loopback}, allowlist(dest, "kept.test:*"))
	env.res.set("origin.test", "127.0.0.1")
	env.res.set("kept.test", "127.0.0.1")
	c, status, _ := connect(t, env.proxy, dest)
	kept, status2, _ := connect(t, env.proxy, fmt.Sprintf("kept.test:%d", origin.Port()))
	if status != 200 || status2 != 200 {
		t.Fatal(status, status2)
	}
	addr, err := env.b.Serve("lease-1", netip.MustParseAddrPort("127.0.0.1:0"), allowlist("kept.test:*"))
	if err != nil || addr != env.proxy {
		t.Fatal(addr, err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a tunnel the new policy refuses is still open: %v", err)
	}
	echo(t, kept, []byte("still here"))
	_, status, body := connect(t, env.proxy, dest)
	wantDenied(t, status, body, 403, "allowlist")
	if _, err := env.b.Serve("lease-1", netip.MustParseAddrPort("127.0.0.2:0"), allowlist("kept.test:*")); bothy.ErrorCode(err) != bothy.ECONFLICT {
		t.Fatalf("Serve on another address: %v", err)
	}
	for _, bad := range []bothy.EgressPolicy{allowlist("bad pattern"), allowlist("[fe80::1%eth0]:443"), {Mode: "some"}} {
		if _, err := env.b.Serve("lease-1", env.proxy, bad); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Fatalf("Serve with %v: %v", bad, err)
		}
	}
}

func TestBroker_Serve_TunnelLimit(t *testing.T) {
	origin := echoServer(t)
	dest := fmt.Sprintf("origin.test:%d", origin.Port())
	env := startBroker(t, egress.BrokerOptions{AllowPrivate: loopback, MaxTunnels: 2}, allowlist(dest))
	env.res.set("origin.test", "127.0.0.1")
	first, _, _ := connect(t, env.proxy, dest)
	for range 1 {
		if _, status, _ := connect(t, env.proxy, dest); status != 200 {
			t.Fatal(status)
		}
	}
	_, status, body := connect(t, env.proxy, dest)
	wantDenied(t, status, body, 503, "too many open connections")
	first.Close()
	for i := 0; ; i++ { // the slot frees once the relay notices
		_, status, _ := connect(t, env.proxy, dest)
		if status == 200 {
			break
		} else if i == 100 {
			t.Fatal("the slot of a closed tunnel was not freed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

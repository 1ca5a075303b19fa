package egress_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/egress"
	"github.com/bothyhq/bothy/testenv"
)

// The test networks share one state directory, so that test runs on one
// machine at the same time take different /30s under its lock; the pool
// is outside 10.200-10.249, where providertest.NetNS makes its own. The origin
// pool, TEST-NET-2, is an address the broker treats as public.
var (
	testNetOpts   = egress.NetworkOptions{StateDir: "/run/bothy/egress-test", Pool: netip.MustParsePrefix("10.252.0.0/16")}
	originNetOpts = egress.NetworkOptions{StateDir: "/run/bothy/egress-test", Pool: netip.MustParsePrefix("198.51.100.0/24")}
)

var quiet = slog.New(slog.DiscardHandler)

// requireNet skips when not root and fails when ip or nft is missing.
func requireNet(t testing.TB) {
	t.Helper()
	testenv.Root(t, "network namespaces need root")
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (apt-get install iproute2 nftables): %v", tool, err)
		}
	}
}

func randomID(prefix string) string {
	b := make([]byte, 5)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// setupNet sets up a network for a new lease and tears it down at the end.
func setupNet(t *testing.T, opt egress.NetworkOptions, prefix string) (*egress.Network, string) {
	t.Helper()
	id := randomID(prefix)
	n, err := egress.Setup(context.Background(), opt, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if residue, err := egress.Teardown(context.Background(), opt, id); err != nil || len(residue) > 0 {
			t.Errorf("teardown %s: %v %q", id, err, residue)
		}
	})
	return n, id
}

// listenIn listens on 0.0.0.0:port inside the namespace at path.
func listenIn(t *testing.T, path string, port int) net.Listener {
	t.Helper()
	var ln net.Listener
	var err error
	if nerr := inNetns(path, func() { ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port)) }); nerr != nil {
		t.Fatal(nerr)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// startOrigin runs an HTTP origin on port 8080 in a namespace of its own,
// at a TEST-NET-2 address the host routes to, and returns that address.
func startOrigin(t *testing.T) netip.AddrPort {
	t.Helper()
	n, _ := setupNet(t, originNetOpts, "origin")
	srv := &http.Server{Handler: http.HandlerFunc(originHandler)}
	ln := listenIn(t, n.Path, 8080)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return netip.AddrPortFrom(n.SandboxAddr, 8080)
}

// dialFrom connects to addr from inside the namespace at path.
func dialFrom(t *testing.T, path, addr string, timeout time.Duration) (net.Conn, error) {
	t.Helper()
	var c net.Conn
	var err error
	if nerr := inNetns(path, func() { c, err = net.DialTimeout("tcp", addr, timeout) }); nerr != nil {
		t.Fatal(nerr)
	}
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// wantUnreachable dials every address from the namespace at once and
// fails for each that answers.
func wantUnreachable(t *testing.T, path string, addrs ...string) {
	t.Helper()
	var wg sync.WaitGroup
	for _, a := range addrs {
		wg.Go(func() {
			if c, err := dialFrom(t, path, a, 300*time.Millisecond); err == nil {
				c.Close()
				t.Errorf("%s is reachable from the sandbox", a)
			}
		})
	}
	wg.Wait()
}

// clientIn is an HTTP client that runs in the namespace at path and uses
// proxy.
func clientIn(path, proxy string) *http.Client {
	pu, _ := url.Parse(proxy)
	var d net.Dialer
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(pu),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			var err error
			if nerr := inNetns(path, func() { c, err = d.DialContext(ctx, network, addr) }); nerr != nil {
				return nil, nerr
			}
			return c, err
		},
	}}
}

func fetch(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// hostAddrs returns this host's addresses but loopback and IPv6 link-local.
func hostAddrs(t *testing.T) []netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if x, ok := netip.AddrFromSlice(a.(*net.IPNet).IP); ok && !x.Unmap().IsLoopback() && !x.IsLinkLocalUnicast() {
			out = append(out, x.Unmap())
		}
	}
	return out
}

func TestSetup(t *testing.T) {
	requireNet(t)
	origin := startOrigin(t)
	n, id := setupNet(t, testNetOpts, "lease")
	if n.Path != "/run/netns/"+n.Name || !testNetOpts.Pool.Contains(n.HostAddr) || n.SandboxAddr != n.HostAddr.Next() ||
		len(n.HostIf) > 15 || n.ProxyPort != egress.DefaultProxyPort || n.ProxyURL() != "http://"+n.HostAddr.String()+":3128" {
		t.Fatalf("%+v", n)
	}
	if _, err := os.Stat(n.Path); err != nil {
		t.Fatal(err)
	}
	b := egress.NewBroker(egress.BrokerOptions{Logger: quiet, Resolver: newResolver("origin.test", origin.Addr().String())})
	t.Cleanup(b.Shutdown)
	if _, err := b.Serve(id, n.Proxy(), allowlist("origin.test:8080")); err != nil {
		t.Fatal(err)
	}
	// A service of the host on every address, as a database or the
	// agent's own API might be.
	svc, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	go func() {
		for c, err := svc.Accept(); err == nil; c, err = svc.Accept() {
			c.Close()
		}
	}()
	svcPort := svc.Addr().(*net.TCPAddr).Port

	t.Run("ThroughTheBroker", func(t *testing.T) {
		c := clientIn(n.Path, n.ProxyURL())
		defer c.CloseIdleConnections()
		if status, body := fetch(t, c, "http://origin.test:8080/"); status != 200 || body != "hello from origin" {
			t.Fatal(status, body)
		}
		status, body := fetch(t, c, "http://"+origin.String()+"/")
		wantDenied(t, status, body, 403, "not on this computer's allowlist")

		conn, err := dialFrom(t, n.Path, n.Proxy().String(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, status, body := connectOn(t, conn, "origin.test:8080"); status != 200 {
			t.Fatal(status, body)
		}
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: origin.test\r\nConnection: close\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, _ := io.ReadAll(conn); !bytes.HasSuffix(got, []byte("hello from origin")) {
			t.Fatalf("%q", got)
		}
		if b.Bytes(id) == 0 {
			t.Fatal("no bytes counted")
		}
	})
	t.Run("HostServicesUnreachable", func(t *testing.T) {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", svcPort), time.Second); err != nil {
			t.Fatal("the host service does not answer on the host:", err)
		} else {
			c.Close()
		}
		addrs := []string{netip.AddrPortFrom(n.HostAddr, uint16(svcPort)).String(), netip.AddrPortFrom(n.HostAddr, 22).String()}
		for _, a := range hostAddrs(t) {
			addrs = append(addrs, netip.AddrPortFrom(a, uint16(svcPort)).String())
			if a != n.HostAddr { // the broker's port on the host's other addresses
				addrs = append(addrs, netip.AddrPortFrom(a, egress.DefaultProxyPort).String())
			}
		}
		wantUnreachable(t, n.Path, addrs...)
	})
	t.Run("DirectEgressFails", func(t *testing.T) {
		// With forwarding off (this host's default) the kernel would drop
		// it anyway: turn it on for the test, so that the nftables
		// forward rules are what refuses it.
		const sysctl = "/proc/sys/net/ipv4/ip_forward"
		was, err := os.ReadFile(sysctl)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sysctl, []byte("1"), 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.WriteFile(sysctl, was, 0) })
		wantUnreachable(t, n.Path, origin.String())
	})
	t.Run("NoUDP", func(t *testing.T) {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{})
		if err != nil {
			t.Fatal(err)
		}
		defer udp.Close()
		port := uint16(udp.LocalAddr().(*net.UDPAddr).Port)
		got := make(chan string, 64)
		go func() {
			buf := make([]byte, 64)
			for {
				k, _, err := udp.ReadFrom(buf)
				if err != nil {
					close(got)
					return
				}
				got <- string(buf[:k])
			}
		}()
		targets := []netip.AddrPort{netip.AddrPortFrom(n.HostAddr, port), netip.AddrPortFrom(n.HostAddr, 53)}
		for _, a := range hostAddrs(t) {
			targets = append(targets, netip.AddrPortFrom(a, port))
		}
		for _, ns := range nameservers(t) {
			targets = append(targets, netip.AddrPortFrom(ns, 53))
		}
		// A DNS query for origin.test; no answer may come back.
		query := []byte("\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x06origin\x04test\x00\x00\x01\x00\x01")
		var wg sync.WaitGroup
		for _, a := range targets {
			wg.Go(func() {
				var c *net.UDPConn
				var err error
				if nerr := inNetns(n.Path, func() { c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(a)) }); nerr != nil || err != nil {
					return // no route is as good as a drop
				}
				defer c.Close()
				payload := query
				if a.Port() == port {
					payload = []byte("from the sandbox")
				}
				c.Write(payload)
				c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				if k, err := c.Read(make([]byte, 512)); err == nil {
					t.Errorf("%s answered %d bytes to the sandbox", a, k)
				}
			})
		}
		wg.Wait()
		// The host's own datagram shows that the listener works and, as
		// the last one sent, that the sandbox's would have arrived first.
		hc, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)})
		if err != nil {
			t.Fatal(err)
		}
		hc.Write([]byte("from the host"))
		hc.Close()
		select {
		case m := <-got:
			if m != "from the host" {
				t.Fatalf("the host received %q", m)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the host's own datagram did not arrive")
		}
	})
}

// nameservers returns the IPv4 resolvers of /etc/resolv.conf.
func nameservers(t *testing.T) []netip.Addr {
	t.Helper()
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() {
				out = append(out, a)
			}
		}
	}
	return out
}

// TestSetup_CommandSeesProxy runs a program in the namespace the way a
// sandbox does, with only the proxy variables to find its way out.
func TestSetup_CommandSeesProxy(t *testing.T) {
	requireNet(t)
	origin := startOrigin(t)
	n, id := setupNet(t, testNetOpts, "lease")
	b := egress.NewBroker(egress.BrokerOptions{Logger: quiet, Resolver: newResolver("origin.test", origin.Addr().String(), "blocked.test", origin.Addr().String())})
	t.Cleanup(b.Shutdown)
	if _, err := b.Serve(id, n.Proxy(), allowlist("origin.test:8080")); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for u, want := range map[string]string{
		"http://origin.test:8080/":  "200 hello from origin",
		"http://blocked.test:8080/": "403 bothy egress: denied blocked.test:8080: not on this computer's allowlist\n",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", n.Name, exe)
		cmd.Env = append(os.Environ(), "BOTHY_EGRESS_HELPER_GET="+u, "HTTP_PROXY="+n.ProxyURL(), "HTTPS_PROXY="+n.ProxyURL(),
			"http_proxy="+n.ProxyURL(), "https_proxy="+n.ProxyURL(), "NO_PROXY=localhost,127.0.0.1")
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil || string(out) != want {
			t.Errorf("GET %s in the sandbox: %v %q, want %q", u, err, out, want)
		}
	}
}

func TestSetup_Idempotent(t *testing.T) {
	requireNet(t)
	ctx := context.Background()
	n, id := setupNet(t, testNetOpts, "lease")
	again, err := egress.Setup(ctx, testNetOpts, id)
	if err != nil || *again != *n {
		t.Fatalf("second Setup: %+v %v, first %+v", again, err, n)
	}
	if got := nft(t, "list", "chain", "inet", "bothy", "lease_"+n.HostIf); strings.Count(got, "accept")+strings.Count(got, "drop") != 3 {
		t.Fatalf("the lease chain after two Setups:\n%s", got)
	}
	if got := nft(t, "list", "chain", "inet", "bothy", "input"); strings.Count(got, "iifname") != 2 {
		t.Fatalf("the input chain after two Setups:\n%s", got)
	}
	// A half-made network, as a crash leaves it, is made again.
	if out, err := exec.Command("ip", "link", "del", "dev", n.HostIf).CombinedOutput(); err != nil {
		t.Fatal(err, string(out))
	}
	again, err = egress.Setup(ctx, testNetOpts, id)
	if err != nil || *again != *n {
		t.Fatalf("Setup after losing the veth: %+v %v", again, err)
	}
	if _, err := net.InterfaceByName(n.HostIf); err != nil {
		t.Fatal(err)
	}
	if c, err := dialFrom(t, n.Path, listenOnHost(t, n.Proxy()).String(), 2*time.Second); err != nil {
		t.Fatal("the remade network does not reach its proxy address:", err)
	} else {
		c.Close()
	}
}

// listenOnHost listens on addr in the host namespace, accepting and
// closing connections.
func listenOnHost(t *testing.T, addr netip.AddrPort) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for c, err := ln.Accept(); err == nil; c, err = ln.Accept() {
			c.Close()
		}
	}()
	return addr
}

func nft(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("nft", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("nft %s: %v %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestSetup_TwoLeases(t *testing.T) {
	requireNet(t)
	a, idA := setupNet(t, testNetOpts, "lease")
	bn, idB := setupNet(t, testNetOpts, "lease")
	pa, pb := netip.PrefixFrom(a.HostAddr, 30).Masked(), netip.PrefixFrom(bn.HostAddr, 30).Masked()
	if pa.Overlaps(pb) || a.HostIf == bn.HostIf || a.Name == bn.Name {
		t.Fatalf("%+v and %+v share a network or a name", a, bn)
	}
	br := egress.NewBroker(egress.BrokerOptions{Logger: quiet})
	t.Cleanup(br.Shutdown)
	for id, n := range map[string]*egress.Network{idA: a, idB: bn} {
		if _, err := br.Serve(id, n.Proxy(), bothy.EgressPolicy{Mode: bothy.EgressAll}); err != nil {
			t.Fatal(err)
		}
	}
	listenIn(t, bn.Path, 9000)
	for _, own := range []struct{ path, addr string }{{a.Path, a.Proxy().String()}, {bn.Path, bn.Proxy().String()}, {bn.Path, "127.0.0.1:9000"}} {
		if c, err := dialFrom(t, own.path, own.addr, 2*time.Second); err != nil {
			t.Fatalf("%s from its own sandbox: %v", own.addr, err)
		} else {
			c.Close()
		}
	}
	wantUnreachable(t, a.Path, bn.Proxy().String(), netip.AddrPortFrom(bn.SandboxAddr, 9000).String())
	// Through its broker, A cannot reach B either: B's addresses are private.
	_, status, body := connectOn(t, mustDial(t, a.Path, a.Proxy().String()), netip.AddrPortFrom(bn.SandboxAddr, 9000).String())
	wantDenied(t, status, body, 403, "a private address")
}

func mustDial(t *testing.T, path, addr string) net.Conn {
	t.Helper()
	c, err := dialFrom(t, path, addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTeardown(t *testing.T) {
	requireNet(t)
	ctx := context.Background()
	id := randomID("lease")
	n, err := egress.Setup(ctx, testNetOpts, id)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if residue, err := egress.Teardown(ctx, testNetOpts, id); err != nil || len(residue) > 0 {
			t.Fatalf("Teardown %d: %v %q", i+1, err, residue)
		}
	}
	if out, _ := exec.Command("ip", "netns", "list").CombinedOutput(); strings.Contains(string(out), n.Name) {
		t.Fatalf("ip netns list still shows %s:\n%s", n.Name, out)
	}
	if _, err := os.Stat(n.Path); !os.IsNotExist(err) {
		t.Fatalf("%s: %v", n.Path, err)
	}
	if out, err := exec.Command("ip", "link", "show", "dev", n.HostIf).CombinedOutput(); err == nil {
		t.Fatalf("ip link still shows %s:\n%s", n.HostIf, out)
	}
	if got := nft(t, "list", "table", "inet", "bothy"); strings.Contains(got, n.HostIf) {
		t.Fatalf("nft still holds rules for %s:\n%s", n.HostIf, got)
	}
	if residue, err := egress.Teardown(ctx, testNetOpts, randomID("never")); err != nil || len(residue) > 0 {
		t.Fatalf("Teardown of a lease without a network: %v %q", err, residue)
	}
}

// BenchmarkSetupTeardown measures a lease's network: Setup then Teardown.
func BenchmarkSetupTeardown(b *testing.B) {
	requireNet(b)
	ctx := context.Background()
	var setup, teardown time.Duration
	for b.Loop() {
		id := randomID("bench")
		start := time.Now()
		if _, err := egress.Setup(ctx, testNetOpts, id); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if residue, err := egress.Teardown(ctx, testNetOpts, id); err != nil || len(residue) > 0 {
			b.Fatal(err, residue)
		}
		setup, teardown = setup+mid.Sub(start), teardown+time.Since(mid)
	}
	b.ReportMetric(float64(setup.Microseconds())/float64(b.N)/1000, "setup-ms")
	b.ReportMetric(float64(teardown.Microseconds())/float64(b.N)/1000, "teardown-ms")
}

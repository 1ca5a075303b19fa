package main

import (
	"fmt"
	"net"
	nethttp "net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/egress"
	bhttp "github.com/bothyhq/bothy/http"
)

// TestE2E_Egress runs the real server with bwrap and the egress broker.
// Two origins listen on the host: an allowed one on 127.0.0.2 (admitted
// by --egress-allow-private 127.0.0.2/32, as an operator would for an
// internal service) and one on every address (0.0.0.0).
//
//   - a computer with egress none reaches neither, by any address;
//   - an allowlist computer reaches the allowed origin through the broker
//     (HTTP_PROXY is set for it), and is metered for it;
//   - a destination not on its allowlist is denied with the broker's reason;
//   - a direct connection that bypasses the proxy fails;
//   - loopback (localhost resolves to 127.0.0.1, not allowed) and the
//     metadata address are denied even though the allowlist names them;
//   - after destroy, no namespace, veth or nftables chain of the leases is
//     left.
func TestE2E_Egress(t *testing.T) {
	needSandbox(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed inside the sandbox (scripts/sandbox-deps installs it)")
	}
	allowed := origin(t, "127.0.0.2:0", "allowed origin")
	open := origin(t, "0.0.0.0:0", "host service")
	_, openPort, _ := net.SplitHostPort(open)
	hostIP := hostAddress(t)

	data, s, a := serveAPI(t, "--egress-allow-private", "127.0.0.2/32")
	none := a.create("none")
	allow := a.createWith(bhttp.CreateComputerRequest{Label: "allow", Egress: bothy.EgressPolicy{Mode: bothy.EgressAllowlist,
		Allow: []string{allowed, "localhost:" + openPort, "169.254.169.254:80"}}})
	if allow.Egress.Mode != bothy.EgressAllowlist {
		t.Fatalf("created with egress %+v", allow.Egress)
	}

	run := func(c *bothy.Computer, script string) (*bothy.Command, string) {
		t.Helper()
		cmd := a.run(c.ID, bothy.RunRequest{Script: script, TimeoutMS: 30000, Wait: true})
		return cmd, output(a.events(cmd.ID, 0, nil)) + stderr(a.events(cmd.ID, 0, nil))
	}
	// A none computer: only loopback, no proxy variables.
	_, out := run(none, fmt.Sprintf(`env | grep -ci _proxy; ip -o link 2>/dev/null | wc -l
for a in %s 127.0.0.1; do curl -sS -m 3 --noproxy '*' http://$a:%s/ && echo REACHED $a; done; true`, hostIP, openPort))
	if strings.Contains(out, "REACHED") || !strings.HasPrefix(out, "0\n") {
		t.Errorf("a computer with egress none reached a host service or got proxy variables:\n%s", out)
	}

	// Allowlisted: through the broker.
	cmd, out := run(allow, "env | grep -i _proxy= | sort; curl -sS -m 10 http://"+allowed+"/")
	for _, v := range []string{"HTTP_PROXY=http://", "HTTPS_PROXY=http://", "http_proxy=http://", "https_proxy=http://", "NO_PROXY=localhost"} {
		if !strings.Contains(out, v) {
			t.Errorf("the allowlist computer's environment lacks %s:\n%s", v, out)
		}
	}
	if !strings.Contains(out, "allowed origin") || cmd.ExitCode == nil || *cmd.ExitCode != 0 {
		t.Errorf("allowlisted origin not reached (%s, exit %v):\n%s", cmd.State, cmd.ExitCode, out)
	}
	if cmd.Usage.NetworkBytes < int64(len("allowed origin")) {
		t.Errorf("network bytes %d for a request through the broker", cmd.Usage.NetworkBytes)
	}
	// Not on the allowlist, or a name that resolves to loopback, or the
	// metadata address: the broker answers 403 with its reason.
	for _, tc := range []struct{ url, reason string }{
		{"http://" + open + "/", "allowlist"},
		{"http://" + hostIP + ":" + openPort + "/", "allowlist"},
		{"http://localhost:" + openPort + "/", "loopback"},
		{"http://169.254.169.254/latest/meta-data/", "metadata"},
	} {
		// --noproxy '' sends even localhost through the proxy, whatever
		// NO_PROXY says.
		_, out := run(allow, "curl -sS -m 10 --noproxy '' -w ' status=%{http_code}' "+tc.url)
		if !strings.Contains(out, "status=403") || !strings.Contains(out, "bothy egress: denied") || !strings.Contains(out, tc.reason) {
			t.Errorf("%s through the broker: want 403 naming %q, got:\n%s", tc.url, tc.reason, out)
		}
	}
	// Bypassing the proxy: nothing but the broker answers.
	_, out = run(allow, fmt.Sprintf(`for a in %s %s; do curl -sS -m 3 --noproxy '*' http://$a/ && echo REACHED $a; done; true`, allowed, hostIP+":"+openPort))
	if strings.Contains(out, "REACHED") {
		t.Errorf("a direct connection bypassed the broker:\n%s", out)
	}
	c := a.computer(allow.ID)
	if c.Usage.NetworkBytes == 0 {
		t.Errorf("the computer's usage shows no network bytes: %+v", c.Usage)
	}
	leases := map[string]bool{}
	for _, cmd := range a.commands(allow.ID) {
		leases[cmd.LeaseID] = cmd.LeaseID != ""
	}
	destroyAll(t, a, data)
	// Only this test's leases: the egress package's tests, which may run
	// at the same time, make networks of their own.
	netns, _ := exec.Command("ip", "netns", "list").Output()
	rules, _ := exec.Command("nft", "list", "table", "inet", "bothy").Output()
	links, _ := exec.Command("ip", "-o", "link").Output()
	for id, ok := range leases {
		if !ok {
			continue
		}
		ns, hostIf := egress.Names(id)
		if strings.Contains(string(netns), ns) || strings.Contains(string(rules), "lease_"+hostIf) || strings.Contains(string(links), hostIf) {
			t.Errorf("lease %s left its network: namespace %s or interface/chain %s", id, ns, hostIf)
		}
	}
	if len(leases) == 0 {
		t.Error("no lease ran the allowlist computer's commands")
	}
	s.stop(t)
}

// origin serves text on addr and returns the address it listens on.
func origin(t *testing.T, addr, text string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &nethttp.Server{Handler: nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		fmt.Fprintln(w, text)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// hostAddress returns an IPv4 address of the host on an interface of its
// own: not loopback, nor a lease's veth or a test's.
func hostAddress(t *testing.T) string {
	t.Helper()
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagLoopback != 0 || strings.HasPrefix(ifc.Name, "bty") || strings.HasPrefix(ifc.Name, "veth") {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
				return ip.IP.String()
			}
		}
	}
	t.Fatal("the host has no IPv4 address besides loopback")
	return ""
}

// TestE2E_Egress_OwnListener runs the real server with
// --egress-allow-private 127.0.0.0/8, as an operator would to let
// sandboxes reach a development service on the host: that service answers
// through the broker, bothy's own API (which also carries the runtime
// protocol) does not, by plain HTTP or CONNECT, and serve warns at start.
func TestE2E_Egress_OwnListener(t *testing.T) {
	needSandbox(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed inside the sandbox (scripts/sandbox-deps installs it)")
	}
	dev := origin(t, "127.0.0.1:0", "dev service")
	data, s, a := serveAPI(t, "--egress-allow-private", "127.0.0.0/8")
	api := strings.TrimPrefix(s.url, "http://")
	c := a.createWith(bhttp.CreateComputerRequest{Label: "all", Egress: bothy.EgressPolicy{Mode: bothy.EgressAll}})
	for _, tc := range []struct{ flags, url, want string }{
		{"", "http://" + dev + "/", "dev service"},
		{"--proxytunnel", "http://" + dev + "/", "dev service"},
		{"", s.url + "/healthz", "status=403"},
		{"--proxytunnel", s.url + "/healthz", "403"},
		{"", s.url + "/runtime/v1/poll", "status=403"},
	} {
		// --noproxy '' sends even loopback through the proxy.
		cmd := a.run(c.ID, bothy.RunRequest{Script: "curl -sS -m 10 --noproxy '' " + tc.flags + " -w ' status=%{http_code}' " + tc.url + "; true",
			TimeoutMS: 30000, Wait: true})
		out := output(a.events(cmd.ID, 0, nil)) + stderr(a.events(cmd.ID, 0, nil))
		if !strings.Contains(out, tc.want) {
			t.Errorf("curl %s %s through the broker: want %q, got:\n%s", tc.flags, tc.url, tc.want, out)
		}
		if tc.want != "dev service" && (strings.Contains(out, "status=200") || tc.flags == "" && !strings.Contains(out, "bothy egress: denied "+api+": it is an address bothy itself listens on")) {
			t.Errorf("curl %s %s reached bothy's own listener or without the broker's reason:\n%s", tc.flags, tc.url, out)
		}
	}
	destroyAll(t, a, data)
	s.stop(t)
	if !strings.Contains(s.stderr.String(), "egress_allow_private admits loopback") || !strings.Contains(s.stderr.String(), "prefixes=[127.0.0.0/8]") {
		t.Errorf("serve did not warn that egress_allow_private admits loopback; stderr:\n%s", s.stderr)
	}
}

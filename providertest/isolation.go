package providertest

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
)

// TestNetworkIsolation checks what an isolating provider's sandbox h,
// started without LeaseSpec.NetNS, reaches of the network: only its own
// loopback interface; no host service listening on every address, by any
// of the host's addresses; not a namespace prepared for another lease;
// and it has its own host name. The process provider isolates nothing, so
// this is not part of TestProvider: bwrap and gvisor call it.
func TestNetworkIsolation(t *testing.T, p bothy.Provider, h *bothy.SandboxHandle) {
	t.Run("OnlyLoopback", func(t *testing.T) {
		// /sys is not mounted, so list interfaces from /proc.
		res, out, _ := Exec(t, p, h, bothy.ExecSpec{Script: "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"})
		if res.ExitCode != 0 || strings.TrimSpace(out) != "lo" {
			t.Fatalf("interfaces %q (result %+v), want only lo", out, res)
		}
	})
	t.Run("ErrConnectHost", func(t *testing.T) {
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("reached\n"))
				c.Close()
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		// Check the listener from the host first, so that a failure inside
		// means the sandbox, not the listener.
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err != nil {
			t.Fatalf("the listener is not reachable from the host: %v", err)
		} else {
			c.Close()
		}
		addrs := []string{"127.0.0.1"}
		if ifaces, err := net.InterfaceAddrs(); err == nil {
			for _, a := range ifaces {
				if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !ip.IP.IsLoopback() {
					addrs = append(addrs, ip.IP.String())
				}
			}
		}
		for _, addr := range addrs {
			script := fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && cat <&3", addr, port)
			res, out, _ := Exec(t, p, h, bothy.ExecSpec{Script: script, Timeout: 5 * time.Second})
			if res.ExitCode == 0 || strings.Contains(out, "reached") {
				t.Errorf("connecting to the host's %s:%d from the sandbox worked: %+v %q", addr, port, res, out)
			}
		}
	})
	t.Run("ErrConnectNetNS", func(t *testing.T) {
		// What a sandbox with LeaseSpec.NetNS reaches (providertest), one
		// without cannot.
		_, addr := NetNS(t)
		res, out, _ := Exec(t, p, h, bothy.ExecSpec{Script: ConnectScript(addr), Timeout: 5 * time.Second})
		if res.ExitCode == 0 || strings.Contains(out, "reached") {
			t.Fatalf("connecting to %s from a sandbox without NetNS worked: %+v %q", addr, res, out)
		}
	})
	t.Run("Hostname", func(t *testing.T) {
		res, out, _ := Exec(t, p, h, bothy.ExecSpec{Script: "cat /proc/sys/kernel/hostname"})
		if res.ExitCode != 0 || out != "bothy\n" {
			t.Fatalf("hostname %q", out)
		}
	})
}

// WantGone waits up to 5 s for Recover of h to answer ENOTFOUND, once the
// test has ended the sandbox from outside, and checks that Exec answers
// ENOTFOUND too.
func WantGone(t *testing.T, p bothy.Provider, h *bothy.SandboxHandle) {
	t.Helper()
	b, _ := h.Encode()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := p.Recover(t.Context(), b)
		if bothy.ErrorCode(err) == bothy.ENOTFOUND {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("Recover after the sandbox ended: %v, want %s", err, bothy.ENOTFOUND)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := p.Exec(t.Context(), h, bothy.ExecSpec{Argv: []string{"true"}}); bothy.ErrorCode(err) != bothy.ENOTFOUND {
		t.Fatalf("Exec after the sandbox ended: %v, want %s", err, bothy.ENOTFOUND)
	}
}

// TestInitUnkillable checks that a command of an isolating sandbox cannot
// end it: after `kill -9 1; kill -9 -1` inside, the next command runs.
// Never call it with a provider that does not isolate processes.
func TestInitUnkillable(t *testing.T, p bothy.Provider) {
	h, _ := Start(t, p, bothy.LeaseSpec{})
	Exec(t, p, h, bothy.ExecSpec{Script: "kill -9 1; kill -9 -1; sleep 1"})
	res, out, _ := Exec(t, p, h, bothy.ExecSpec{Argv: []string{"echo", "alive"}})
	if res.ExitCode != 0 || out != "alive\n" {
		t.Fatalf("after kill -9 -1 in the sandbox: result %+v stdout %q", res, out)
	}
}

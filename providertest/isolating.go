package providertest

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/testenv"
)

// Isolating describes an isolating provider to TestIsolating: one that
// runs each lease in a sandbox of its own, as a uid of its own, without
// the host's network, and keeps nothing of a lease on the host after Stop
// (bwrap, gvisor). The process provider isolates nothing: it runs only
// TestProvider.
type Isolating struct {
	// New returns a provider, as TestProvider's newProvider does.
	New func(t *testing.T) bothy.Provider
	// UIDBase is the first uid of the range that the provider's leases
	// get.
	UIDBase int
	// Unprivileged names the fields of /proc/self/status by which a
	// command of the sandbox shows that it has no capabilities (each is
	// 0) and runs with no_new_privs (1); each must be there. Under bwrap
	// they are CapInh, CapPrm, CapEff, CapAmb and NoNewPrivs: the bounding
	// set is full, as entering the sandbox's user namespace fills it and
	// once the command runs nothing can empty it, but it is bound to that
	// namespace, and no_new_privs keeps file capabilities and set-uid
	// programs from drawing on it. gVisor's /proc shows CapBnd, and no
	// CapAmb nor NoNewPrivs.
	Unprivileged []string
	// Cases are the provider's own cases, run as subtests in the lease of
	// the isolation cases (h, with the workspace ws) before NoArgvSecrets
	// stops it.
	Cases map[string]func(t *testing.T, p bothy.Provider, h *bothy.SandboxHandle, ws string)
	// Traces returns, for a running sandbox h, the host paths that Stop
	// removes and a string that the command lines of the sandbox's host
	// processes hold, or "" if it has none to look for.
	Traces func(t *testing.T, h *bothy.SandboxHandle) (paths []string, marker string)
	// End ends h's sandbox from the host, as only the host can.
	End func(t *testing.T, h *bothy.SandboxHandle)
}

// Available returns p, or, if New of the provider failed with err, ends
// the test as Unavailable: the host cannot run the provider.
func Available[P bothy.Provider](t testing.TB, p P, err error) P {
	t.Helper()
	if err != nil {
		testenv.Skip(t, "%v; run scripts/sandbox-deps as root", err)
	}
	return p
}

// TestIsolating runs the cases of an isolating provider, besides
// TestProvider's: what a command of its sandbox is (the lease's uid, no
// capabilities, no /etc/shadow, a read-only system), what it reaches of
// the network, that its environment never shows in a host command line,
// that it cannot end its sandbox, that Stop leaves nothing, and that a
// sandbox ended from outside is gone.
func TestIsolating(t *testing.T, c Isolating) {
	p := c.New(t)
	h, ws := Start(t, p, bothy.LeaseSpec{})
	t.Run("LeaseUID", func(t *testing.T) { testLeaseUID(t, p, h, ws, c.UIDBase) })
	t.Run("ErrShadow", func(t *testing.T) {
		res, _, errOut := Exec(t, p, h, bothy.ExecSpec{Argv: []string{"cat", "/etc/shadow"}})
		if res.ExitCode == 0 || !strings.Contains(errOut, "Permission denied") {
			t.Fatalf("reading /etc/shadow: result %+v stderr %q", res, errOut)
		}
	})
	t.Run("NoCapabilities", func(t *testing.T) { testNoCapabilities(t, p, h, c.Unprivileged) })
	t.Run("ReadOnlySystem", func(t *testing.T) {
		res, _, _ := Exec(t, p, h, bothy.ExecSpec{Script: "touch /usr/x || touch /etc/x || exit 0; exit 1"})
		if res.ExitCode != 0 {
			t.Fatal("a command wrote to /usr or /etc")
		}
	})
	for name, run := range c.Cases {
		t.Run(name, func(t *testing.T) { run(t, p, h, ws) })
	}
	testNetworkIsolation(t, p, h)
	t.Run("NoArgvSecrets", func(t *testing.T) { testNoArgvSecrets(t, p, h) })
	t.Run("InitUnkillable", func(t *testing.T) { testInitUnkillable(t, c.New(t)) })
	t.Run("Stop", func(t *testing.T) { testIsolatedStop(t, c) })
	t.Run("RecoverEnded", func(t *testing.T) {
		p := c.New(t)
		h, _ := Start(t, p, bothy.LeaseSpec{})
		c.End(t, h)
		wantGone(t, p, h)
	})
}

// testLeaseUID checks that a command runs as one uid of the lease range,
// with the same gid, and that what it writes to the workspace is theirs on
// the host.
func testLeaseUID(t *testing.T, p bothy.Provider, h *bothy.SandboxHandle, ws string, base int) {
	res, out, _ := Exec(t, p, h, bothy.ExecSpec{Script: "id -u; id -g; echo x > owned"})
	f := strings.Fields(out)
	if res.ExitCode != 0 || len(f) != 2 || f[0] != f[1] {
		t.Fatalf("id: %q (result %+v)", out, res)
	}
	uid, _ := strconv.Atoi(f[0])
	if uid < base {
		t.Fatalf("uid %d, want one of the lease range", uid)
	}
	fi, err := os.Stat(filepath.Join(ws, "owned"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != uid {
		t.Fatalf("a file the command wrote is %d:%d on the host, want %d:%d", st.Uid, st.Gid, uid, uid)
	}
}

// testNoCapabilities checks that a command shows each of fields in
// /proc/self/status, its capability sets empty and no_new_privs set.
func testNoCapabilities(t *testing.T, p bothy.Provider, h *bothy.SandboxHandle, fields []string) {
	res, out, _ := Exec(t, p, h, bothy.ExecSpec{Script: "grep -E '^(" + strings.Join(fields, "|") + "):' /proc/self/status"})
	if res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(fields) {
		t.Fatalf("status lines %q, want %q", out, fields)
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 2 && (f[0] == "NoNewPrivs:" && f[1] == "1" || f[1] == "0000000000000000") {
			continue
		}
		t.Errorf("capability set not empty or no_new_privs unset: %q", l)
	}
}

// testNoArgvSecrets checks that environment values never appear in a
// host command line, which every user of the host can read. It stops h.
func testNoArgvSecrets(t *testing.T, p bothy.Provider, h *bothy.SandboxHandle) {
	m := Marker()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Exec(context.Background(), h, bothy.ExecSpec{Argv: []string{"sleep", m}, Env: map[string]string{"TOKEN": "tok-" + m}, Timeout: 10 * time.Second})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(ProcessesOf(t, p, h, m)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if pids := Processes("tok-" + m); len(pids) > 0 {
		t.Errorf("an environment value is in the command line of %v", pids)
	}
	p.Stop(context.Background(), h) // ends the sleeper; Start's cleanup stops again
	<-done
}

// testIsolatedStop checks that a second Start of a lease conflicts, and
// that Stop leaves nothing of the sandbox on the host but the workspace.
func testIsolatedStop(t *testing.T, c Isolating) {
	p := c.New(t)
	spec := bothy.LeaseSpec{LeaseID: NewID("lease"), ComputerID: "c1", Generation: 1, Workspace: t.TempDir()}
	h, err := p.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := h.Encode()
	paths, marker := c.Traces(t, h)
	if _, err := p.Start(context.Background(), spec); bothy.ErrorCode(err) != bothy.ECONFLICT {
		t.Fatalf("second Start of one lease: %v, want %s", err, bothy.ECONFLICT)
	}
	if res, err := p.Stop(context.Background(), h); err != nil || !res.Empty() {
		t.Fatalf("Stop: %+v, %v", res, err)
	}
	for _, path := range paths {
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("%s is left: %v", path, err)
		}
	}
	if marker != "" {
		if pids := Processes(marker); len(pids) > 0 {
			t.Errorf("host processes %v of the sandbox are left", pids)
		}
	}
	if _, err := os.Stat(spec.Workspace); err != nil {
		t.Errorf("the workspace went with the sandbox: %v", err)
	}
	if _, err := p.Recover(context.Background(), b); bothy.ErrorCode(err) != bothy.ENOTFOUND {
		t.Fatalf("Recover after Stop: %v, want %s", err, bothy.ENOTFOUND)
	}
}

// testNetworkIsolation checks what an isolating provider's sandbox h,
// started without LeaseSpec.NetNS, reaches of the network: only its own
// loopback interface; no host service listening on every address, by any
// of the host's addresses; not a namespace prepared for another lease;
// and it has its own host name.
func testNetworkIsolation(t *testing.T, p bothy.Provider, h *bothy.SandboxHandle) {
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
		go answerReached(ln)
		port := uint16(ln.Addr().(*net.TCPAddr).Port)
		// Check the listener from the host first, so that a failure inside
		// means the sandbox, not the listener.
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err != nil {
			t.Fatalf("the listener is not reachable from the host: %v", err)
		} else {
			c.Close()
		}
		addrs := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		if ifaces, err := net.InterfaceAddrs(); err == nil {
			for _, a := range ifaces {
				if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !ip.IP.IsLoopback() {
					addrs = append(addrs, netip.AddrFrom4([4]byte(ip.IP.To4())))
				}
			}
		}
		for _, addr := range addrs {
			script := ConnectScript(netip.AddrPortFrom(addr, port))
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

// wantGone waits up to 5 s for Recover of h to answer ENOTFOUND, once the
// test has ended the sandbox from outside, and checks that Exec answers
// ENOTFOUND too.
func wantGone(t *testing.T, p bothy.Provider, h *bothy.SandboxHandle) {
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

// testInitUnkillable checks that a command of an isolating sandbox cannot
// end it: after `kill -9 1; kill -9 -1` inside, the next command runs.
func testInitUnkillable(t *testing.T, p bothy.Provider) {
	h, _ := Start(t, p, bothy.LeaseSpec{})
	Exec(t, p, h, bothy.ExecSpec{Script: "kill -9 1; kill -9 -1; sleep 1"})
	res, out, _ := Exec(t, p, h, bothy.ExecSpec{Argv: []string{"echo", "alive"}})
	if res.ExitCode != 0 || out != "alive\n" {
		t.Fatalf("after kill -9 -1 in the sandbox: result %+v stdout %q", res, out)
	}
}

// WantAlive checks, after what a command of h did to exhaust a limit,
// that the host can still start a process and that the lease still runs a
// command, which no limit killed.
func WantAlive(t *testing.T, p bothy.Provider, h *bothy.SandboxHandle, after string) {
	t.Helper()
	if out, err := exec.Command("echo", "host").Output(); err != nil || string(out) != "host\n" {
		t.Fatalf("host command after %s: %q, %v", after, out, err)
	}
	res, out, _ := Exec(t, p, h, bothy.ExecSpec{Argv: []string{"echo", "alive"}})
	if res.ExitCode != 0 || out != "alive\n" || res.OOMKilled {
		t.Fatalf("after %s: result %+v stdout %q", after, res, out)
	}
}

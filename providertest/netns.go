package providertest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/testenv"
)

// NetNS creates a network namespace as the egress set-up does
// (../shared/LAB.md): a veth pair whose sandbox side is in the namespace,
// a /30 between the two sides, and a TCP listener on the host side that
// answers "reached\n" to every connection. It returns the namespace's path
// and the listener's address, and removes both when the test ends. It
// needs root and ip; without them it ends the test with testenv.Skip.
func NetNS(t testing.TB) (path string, listener netip.AddrPort) {
	t.Helper()
	testenv.Root(t, "creating a network namespace needs root")
	ip := testenv.Program(t, "ip")
	var b [4]byte
	rand.Read(b[:])
	id := fmt.Sprintf("%x", b)
	name, host, peer := "bothy-test-"+id, "bt"+id+"h", "bt"+id+"s"
	// A random /30 in 10.200.0.0-10.249.255.255: tests of other packages
	// make theirs at the same time.
	base := netip.AddrFrom4([4]byte{10, 200 + b[0]%50, b[1], b[2] &^ 3})
	hostAddr, peerAddr := base.Next(), base.Next().Next()
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v (%s)", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	run("netns", "add", name)
	t.Cleanup(func() {
		exec.Command(ip, "netns", "del", name).Run()
		exec.Command(ip, "link", "del", host).Run() // gone with the namespace, unless that failed
	})
	run("link", "add", host, "type", "veth", "peer", "name", peer)
	run("link", "set", peer, "netns", name)
	run("addr", "add", hostAddr.String()+"/30", "dev", host)
	run("link", "set", host, "up")
	run("-n", name, "addr", "add", peerAddr.String()+"/30", "dev", peer)
	run("-n", name, "link", "set", peer, "up")
	run("-n", name, "link", "set", "lo", "up")

	ln, err := net.Listen("tcp", netip.AddrPortFrom(hostAddr, 0).String())
	if err != nil {
		t.Fatalf("listen on the host side: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go answerReached(ln)
	return filepath.Join("/run/netns", name), netip.MustParseAddrPort(ln.Addr().String())
}

// answerReached answers "reached\n" to every connection of ln until it is
// closed.
func answerReached(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte("reached\n"))
		c.Close()
	}
}

// ConnectScript is a bash script that connects to addr and prints what it
// reads.
func ConnectScript(addr netip.AddrPort) string {
	return fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && cat <&3", addr.Addr(), addr.Port())
}

// testNetNS checks that a sandbox started with LeaseSpec.NetNS is in that
// namespace: it reaches the listener on the host side of the veth. That a
// sandbox without one cannot is the providers' own test: the process
// provider shares the agent's network.
func testNetNS(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	path, addr := NetNS(t)
	p := newProvider(t)
	h, _ := Start(t, p, bothy.LeaseSpec{NetNS: path})
	if h.NetNS != path {
		t.Fatalf("handle's NetNS %q, want %q", h.NetNS, path)
	}
	res, out, errOut := Exec(t, p, h, bothy.ExecSpec{Script: ConnectScript(addr), Timeout: 10 * time.Second})
	if res.ExitCode != 0 || out != "reached\n" {
		t.Fatalf("connecting to %s from a sandbox in %s: result %+v stdout %q stderr %q", addr, path, res, out, errOut)
	}
	t.Run("KeptAtStop", func(t *testing.T) {
		if res, err := p.Stop(context.Background(), h); err != nil || !res.Empty() {
			t.Fatalf("Stop: residue %+v, error %v", res, err)
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("Stop removed the caller's network namespace: %v", err)
		}
	})
	t.Run("ErrNotNamespace", func(t *testing.T) {
		ws := t.TempDir()
		h, err := p.Start(context.Background(), bothy.LeaseSpec{LeaseID: NewID("lease"), ComputerID: "c1", Generation: 1, Workspace: ws, NetNS: ws})
		if err == nil {
			p.Stop(context.Background(), h)
		}
		if code := bothy.ErrorCode(err); code != bothy.EINVALID {
			t.Fatalf("Start with a directory as network namespace: error %v, want %s", err, bothy.EINVALID)
		}
	})
}

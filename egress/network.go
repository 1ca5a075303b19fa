package egress

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
)

// Defaults of NetworkOptions.
const (
	DefaultStateDir  = "/run/bothy/egress"
	DefaultProxyPort = 3128
	// NetnsDir is where `ip netns` keeps named network namespaces.
	NetnsDir = "/run/netns"
	// SandboxIf is the name of the veth end inside the namespace.
	SandboxIf = "eth0"
	// ifPrefix starts the name of every host-side veth; the host rules drop
	// whatever comes from such an interface that no lease rule admits.
	ifPrefix = "bty"
	nftTable = "inet bothy"
)

// DefaultPool is the IPv4 range from which Setup hands out /30 networks.
var DefaultPool = bothy.LeasePool

// NetworkOptions configures Setup and Teardown. Every process that sets up
// networks on a host must use the same StateDir and Pool, because the /30s
// are handed out under a lock on a file in StateDir.
type NetworkOptions struct {
	// StateDir holds the lock and one file per lease; "" means
	// DefaultStateDir (on tmpfs, so it is forgotten, like the namespaces,
	// at reboot).
	StateDir string
	// Pool is the IPv4 range the /30s come from; the zero value means
	// DefaultPool.
	Pool netip.Prefix
	// ProxyPort is the broker's port on HostAddr; 0 means DefaultProxyPort.
	ProxyPort uint16
}

func (o NetworkOptions) withDefaults() (NetworkOptions, error) {
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if !o.Pool.IsValid() {
		o.Pool = DefaultPool
	}
	if !o.Pool.Addr().Is4() || o.Pool.Bits() > 30 {
		return o, bothy.Errorf(bothy.EINVALID, "egress pool %s must be an IPv4 prefix of at most /30", o.Pool)
	}
	o.Pool = o.Pool.Masked()
	if o.ProxyPort == 0 {
		o.ProxyPort = DefaultProxyPort
	}
	return o, nil
}

// Network is the network namespace of one lease: a veth pair whose host
// end has HostAddr/30 and whose sandbox end, SandboxIf in the namespace,
// has SandboxAddr/30 and the default route via HostAddr.
type Network struct {
	Name        string     `json:"name"` // netns name: "bothy-" + lease id
	Path        string     `json:"path"` // NetnsDir/Name, for LeaseSpec.NetNS
	HostAddr    netip.Addr `json:"host_addr"`
	SandboxAddr netip.Addr `json:"sandbox_addr"`
	ProxyPort   uint16     `json:"proxy_port"`
	HostIf      string     `json:"host_if"` // host end of the veth
}

// Proxy returns the address the broker must serve the lease on.
func (n *Network) Proxy() netip.AddrPort { return netip.AddrPortFrom(n.HostAddr, n.ProxyPort) }

// ProxyURL returns the value of HTTP_PROXY and HTTPS_PROXY for the lease.
func (n *Network) ProxyURL() string { return "http://" + n.Proxy().String() }

// state is the file StateDir/leases/LEASE.json.
type state struct {
	Version  int     `json:"version"`
	LeaseID  string  `json:"lease_id"`
	Network  Network `json:"network"`
	Complete bool    `json:"complete"` // Setup finished
}

// openState checks the lease id, fills opt's defaults, takes the state
// lock (unlock releases it) and reads the lease's state (nil if none).
func openState(ctx context.Context, opt NetworkOptions, leaseID string) (NetworkOptions, *state, func(), error) {
	if err := bothy.ValidateID("lease id", leaseID); err != nil {
		return opt, nil, nil, err
	}
	opt, err := opt.withDefaults()
	if err != nil {
		return opt, nil, nil, err
	}
	unlock, err := lockState(ctx, opt.StateDir)
	if err != nil {
		return opt, nil, nil, err
	}
	st, err := readState(opt.StateDir, leaseID)
	if err != nil {
		unlock()
		return opt, nil, nil, err
	}
	return opt, st, unlock, nil
}

// Names returns the names of a lease's network namespace and of the host
// side of its veth (whose nftables chain is lease_HOSTIF), for tests and
// diagnostics.
func Names(leaseID string) (netns, hostIf string) { return names(leaseID) }

// names derives the names of a lease's namespace and host interface.
func names(leaseID string) (netns, hostIf string) {
	sum := sha256.Sum256([]byte(leaseID))
	return "bothy-" + leaseID, ifPrefix + hex.EncodeToString(sum[:6])
}

// Setup creates the network of a lease: a named namespace with lo up, a
// veth pair, and the host nftables rules that let the sandbox reach only
// HostAddr:ProxyPort. Setting up a lease that is already set up returns
// its network (after an agent restart, say), with its rules applied again;
// a half-made network left by a crash is made again with the same
// addresses.
func Setup(ctx context.Context, opt NetworkOptions, leaseID string) (*Network, error) {
	opt, st, unlock, err := openState(ctx, opt, leaseID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if st != nil && st.Complete && exists(st.Network.Path) && linkExists(st.Network.HostIf) {
		if err := runNft(ctx, nftSetup(&st.Network)); err != nil {
			return nil, fmt.Errorf("egress setup %s: %w", leaseID, err)
		}
		return &st.Network, nil
	}
	if st == nil {
		n, err := allocate(opt, leaseID)
		if err != nil {
			return nil, err
		}
		st = &state{Version: 1, LeaseID: leaseID, Network: n}
		if err := writeState(opt.StateDir, st); err != nil {
			return nil, err
		}
	}
	// Clear what a crash (or a lost state directory) left under the
	// lease's names; this costs two lookups when there is nothing.
	n := &st.Network
	removeNetwork(ctx, n)
	if err := create(ctx, n); err != nil {
		cctx := context.WithoutCancel(ctx)
		removeNetwork(cctx, n)
		runNft(cctx, nftTeardown(n))
		os.Remove(statePath(opt.StateDir, leaseID))
		return nil, fmt.Errorf("egress setup %s: %w", leaseID, err)
	}
	st.Complete = true
	if err := writeState(opt.StateDir, st); err != nil {
		return nil, err
	}
	return n, nil
}

// create applies the rules and, at the same time (nft and ip each spend
// most of their time waiting on the kernel), makes the namespace and the
// veth. That the veth may exist a few milliseconds before its rules is
// harmless: nothing runs in the namespace before Setup returns, and the
// table's catch-all rule drops whatever comes from a bty* interface
// without a lease chain.
func create(ctx context.Context, n *Network) error {
	nftErr := make(chan error, 1)
	go func() { nftErr <- runNft(ctx, nftSetup(n)) }()
	return errors.Join(createLinks(ctx, n), <-nftErr)
}

func createLinks(ctx context.Context, n *Network) error {
	h := n.HostIf
	host := fmt.Sprintf("netns add %s\nlink add %s type veth peer name %s netns %s\n"+
		"link set dev %s addrgenmode none\naddr add %s/30 dev %s\nlink set dev %s up\n",
		n.Name, h, SandboxIf, n.Name, h, n.HostAddr, h, h)
	if err := runIP(ctx, "", host); err != nil {
		return err
	}
	inside := fmt.Sprintf("link set dev lo up\nlink set dev %s addrgenmode none\naddr add %s/30 dev %s\n"+
		"link set dev %s up\nroute add default via %s dev %s\n",
		SandboxIf, n.SandboxAddr, SandboxIf, SandboxIf, n.HostAddr, SandboxIf)
	return runIP(ctx, n.Name, inside)
}

// Teardown removes the lease's veth, namespace and rules, and its state
// file once nothing is left. It returns what it could not remove, empty
// when clean; tearing down a lease that has no network is not an error.
// Processes still in the namespace keep it alive, but without the veth it
// has no way out.
func Teardown(ctx context.Context, opt NetworkOptions, leaseID string) ([]string, error) {
	opt, st, unlock, err := openState(ctx, opt, leaseID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	n := &Network{}
	if st != nil {
		n = &st.Network
	} else {
		n.Name, n.HostIf = names(leaseID)
		n.Path = filepath.Join(NetnsDir, n.Name)
	}
	// Deleting a veth waits ~25 ms on the kernel; remove the rules
	// meanwhile (the catch-all rule covers the veth until it is gone).
	nftErr := make(chan error, 1)
	go func() { nftErr <- runNft(ctx, nftTeardown(n)) }()
	residue := removeNetwork(ctx, n)
	if err := <-nftErr; err != nil {
		residue = append(residue, fmt.Sprintf("nft chain %s %s: %v", nftTable, nftChain(n), err))
	}
	if len(residue) == 0 {
		if err := os.Remove(statePath(opt.StateDir, leaseID)); err != nil && !errors.Is(err, os.ErrNotExist) {
			residue = append(residue, fmt.Sprintf("state file: %v", err))
		}
	}
	return residue, nil
}

// removeNetwork deletes the veth (both ends) and the namespace, and
// returns what is still there.
func removeNetwork(ctx context.Context, n *Network) []string {
	var batch strings.Builder
	if linkExists(n.HostIf) {
		fmt.Fprintf(&batch, "link del dev %s\n", n.HostIf)
	}
	if exists(n.Path) {
		fmt.Fprintf(&batch, "netns del %s\n", n.Name)
	}
	var failed error
	if batch.Len() > 0 {
		failed = runIP(ctx, "", batch.String())
	}
	var residue []string
	// Deleting a link is synchronous but for rare reference waits.
	for i := 0; i < 100 && linkExists(n.HostIf); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if linkExists(n.HostIf) {
		residue = append(residue, fmt.Sprintf("link %s: %v", n.HostIf, failed))
	}
	if exists(n.Path) {
		residue = append(residue, fmt.Sprintf("netns %s: %v", n.Name, failed))
	}
	return residue
}

func nftChain(n *Network) string { return "lease_" + n.HostIf }

// nftSetup makes the table if needed, rewrites its base chains (so a host
// that never had the table, or whose table was damaged, gets them exactly
// once) and (re)writes the lease's chain. nft applies the whole script
// atomically. Other tables are left alone: a drop here is final whatever
// they accept.
func nftSetup(n *Network) string {
	return fmt.Sprintf(`add table %[1]s
add map %[1]s leases { type ifname : verdict; }
add chain %[1]s input { type filter hook input priority filter - 10; policy accept; }
flush chain %[1]s input
add rule %[1]s input iifname vmap @leases
add rule %[1]s input iifname "%[2]s*" drop
add chain %[1]s forward { type filter hook forward priority filter - 10; policy accept; }
flush chain %[1]s forward
add rule %[1]s forward iifname "%[2]s*" drop
add rule %[1]s forward oifname "%[2]s*" drop
add chain %[1]s %[3]s
flush chain %[1]s %[3]s
add rule %[1]s %[3]s ct state established,related accept
add rule %[1]s %[3]s ct state new ip saddr %[4]s ip daddr %[5]s tcp dport %[6]d accept
add rule %[1]s %[3]s drop
add element %[1]s leases { "%[7]s" : jump %[3]s }
`, nftTable, ifPrefix, nftChain(n), n.SandboxAddr, n.HostAddr, n.ProxyPort, n.HostIf)
}

// nftTeardown removes the lease's element and chain. nft 1.0.6 has no
// "destroy", so the script first adds them: deleting then never fails on
// a host where they are already gone.
func nftTeardown(n *Network) string {
	return fmt.Sprintf(`add table %[1]s
add map %[1]s leases { type ifname : verdict; }
add chain %[1]s %[2]s
add element %[1]s leases { "%[3]s" : jump %[2]s }
delete element %[1]s leases { "%[3]s" }
flush chain %[1]s %[2]s
delete chain %[1]s %[2]s
`, nftTable, nftChain(n), n.HostIf)
}

func runNft(ctx context.Context, script string) error {
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// runIP runs an `ip -batch`, inside the named namespace if netns is set.
func runIP(ctx context.Context, netns, batch string) error {
	args := []string{"-batch", "-"}
	if netns != "" {
		args = append([]string{"-n", netns}, args...)
	}
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdin = strings.NewReader(batch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// allocate picks the first /30 of the pool that no other lease's state
// holds and that overlaps no address of this host. The caller holds the
// lock.
func allocate(opt NetworkOptions, leaseID string) (Network, error) {
	name, hostIf := names(leaseID)
	used := map[netip.Addr]bool{}
	entries, err := os.ReadDir(filepath.Join(opt.StateDir, "leases"))
	if err != nil {
		return Network{}, fmt.Errorf("egress setup: %w", err)
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		st, err := readState(opt.StateDir, id)
		if err != nil || st == nil {
			continue // a damaged file only costs its /30
		}
		if st.Network.HostIf == hostIf {
			return Network{}, bothy.Errorf(bothy.ECONFLICT, "egress setup %s: interface name %s is taken by lease %s", leaseID, hostIf, st.LeaseID)
		}
		used[st.Network.HostAddr] = true
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if x, ok := netip.AddrFromSlice(n.IP.To4()); ok && opt.Pool.Contains(x) {
					used[addrAt(x, 0, -int(u32(x)&3)).Next()] = true
				}
			}
		}
	}
	size := uint64(1) << (32 - opt.Pool.Bits())
	for off := uint64(0); off+4 <= size; off += 4 {
		host := addrAt(opt.Pool.Addr(), 1, int(off))
		if used[host] {
			continue
		}
		return Network{Name: name, Path: filepath.Join(NetnsDir, name), HostAddr: host, SandboxAddr: host.Next(), ProxyPort: opt.ProxyPort, HostIf: hostIf}, nil
	}
	return Network{}, bothy.Errorf(bothy.EUNAVAILABLE, "egress setup %s: address pool %s is exhausted", leaseID, opt.Pool)
}

func u32(a netip.Addr) uint32 { b := a.As4(); return binary.BigEndian.Uint32(b[:]) }

// addrAt returns a+k+off.
func addrAt(a netip.Addr, k, off int) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], u32(a)+uint32(k)+uint32(off))
	return netip.AddrFrom4(b)
}

func statePath(dir, leaseID string) string {
	return filepath.Join(dir, "leases", leaseID+".json")
}

// readState returns nil, nil when the lease has no state file.
func readState(dir, leaseID string) (*state, error) {
	b, err := os.ReadFile(statePath(dir, leaseID))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("egress state: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("egress state %s: %w", leaseID, err)
	} else if st.LeaseID != leaseID || !st.Network.HostAddr.Is4() {
		return nil, fmt.Errorf("egress state %s: damaged", leaseID)
	}
	return &st, nil
}

func writeState(dir string, st *state) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	p := statePath(dir, st.LeaseID)
	tmp := p + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("egress state: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("egress state: %w", err)
	}
	return nil
}

// lockState takes the lock that serializes Setup and Teardown across
// processes (flock, so a dead holder releases it).
func lockState(ctx context.Context, dir string) (func(), error) {
	if err := os.MkdirAll(filepath.Join(dir, "leases"), 0o700); err != nil {
		return nil, fmt.Errorf("egress state: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("egress lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		} else if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("egress lock: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("egress lock: %w", ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Unavailable says why this host cannot make lease networks ("" if it
// can): Setup needs root and the ip and nft programs.
func Unavailable() string {
	if os.Geteuid() != 0 {
		return "not running as root"
	}
	for _, prog := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(prog); err != nil {
			return prog + " is not installed (scripts/sandbox-deps installs it)"
		}
	}
	return ""
}

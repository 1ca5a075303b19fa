// Package egress gives a lease's sandbox a network through which only an
// allowlisting HTTP proxy, the broker, is reachable.
//
// The design has two halves that only work together:
//
//   - Setup (network.go) puts the sandbox in its own network namespace with
//     one veth pair. nftables rules on the host side of the veth accept only
//     new TCP connections to HostAddr:ProxyPort (and the replies of
//     connections the host opened); everything else arriving from the
//     sandbox is dropped, and nothing is forwarded. So the broker is the one
//     way out, and it needs no ip_forward or NAT.
//   - The Broker listens on HostAddr:ProxyPort, one listener per lease, and
//     relays CONNECT tunnels and plain-HTTP (absolute-URI) requests. It
//     checks the destination against the lease's bothy.EgressPolicy, then
//     resolves the name itself and checks every resolved address: loopback,
//     private, link-local, CGNAT, multicast and reserved addresses and the
//     addresses of this host are refused unless an operator admitted them
//     with AllowPrivate, and the cloud metadata address and bothy's own
//     listeners (OwnListeners) are always refused.
//     It then dials the address it checked, never the name, so a second DNS
//     answer (rebinding) cannot redirect the connection.
//
// A denial is an HTTP 403 whose plain-text body says why, so that the
// command (curl, pip, git) shows the reason to the agent that ran it.
package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bothyhq/bothy"
)

// Limits of one lease's listener.
const (
	// DefaultMaxTunnels bounds the open CONNECT tunnels and plain-HTTP
	// exchanges of a lease; one more is answered 503.
	DefaultMaxTunnels = 256
	// maxConns bounds the client connections of a lease; Accept waits
	// beyond it.
	maxConns              = 1024
	readHeaderTimeout     = 10 * time.Second
	idleTimeout           = 2 * time.Minute
	responseHeaderTimeout = 2 * time.Minute
	defaultDialTimeout    = 10 * time.Second
	// keepClosed is how many closed leases Bytes still answers for.
	keepClosed = 4096
)

// Resolver resolves names for the broker; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// BrokerOptions configures a Broker. The zero value is usable.
type BrokerOptions struct {
	// Resolver resolves the names of destinations; nil means
	// net.DefaultResolver.
	Resolver Resolver
	// AllowPrivate lists prefixes whose addresses are admitted even though
	// they are loopback, private, link-local or CGNAT (for an operator's
	// package mirror, say). The cloud metadata addresses 169.254.169.254 and
	// fd00:ec2::254 and the non-loopback addresses of this host are denied
	// even inside these prefixes.
	AllowPrivate []netip.Prefix
	// LeasePools are the ranges of the lease networks (NetworkOptions.Pool;
	// nil means DefaultPool): always denied, whatever AllowPrivate says,
	// so that no lease reaches another lease's sandbox through its broker.
	LeasePools []netip.Prefix
	// OwnListeners are the addresses bothy itself listens on (`bothy
	// serve`'s API, which also carries the runtime protocol): always
	// denied on their port, whatever AllowPrivate says, so that an
	// AllowPrivate covering loopback (for a development service on the
	// host) does not let a sandbox reach bothy's API. An unspecified
	// address (0.0.0.0, ::) stands for every address of this host:
	// loopback, the unspecified address and the host's own addresses.
	OwnListeners []netip.AddrPort
	// Logger receives denials (Info) and relay failures; nil means
	// slog.Default().
	Logger *slog.Logger
	// DialTimeout bounds resolving a destination and connecting to it;
	// 0 means 10s.
	DialTimeout time.Duration
	// MaxTunnels bounds the concurrent tunnels of a lease; 0 means
	// DefaultMaxTunnels.
	MaxTunnels int
}

// Broker is the egress proxy of the leases of one host. It is safe for
// concurrent use.
type Broker struct {
	opt      BrokerOptions
	resolver Resolver
	log      *slog.Logger
	local    localAddrs

	mu          sync.Mutex
	leases      map[string]*lease
	closed      map[string]*lease // closed leases, for Bytes
	closedOrder []string
	shut        bool
}

// NewBroker returns a Broker that serves no lease yet.
func NewBroker(opt BrokerOptions) *Broker {
	b := &Broker{opt: opt, resolver: opt.Resolver, log: opt.Logger, leases: map[string]*lease{}, closed: map[string]*lease{}}
	if b.resolver == nil {
		b.resolver = net.DefaultResolver
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	if b.opt.DialTimeout <= 0 {
		b.opt.DialTimeout = defaultDialTimeout
	}
	if b.opt.MaxTunnels <= 0 {
		b.opt.MaxTunnels = DefaultMaxTunnels
	}
	if len(b.opt.LeasePools) == 0 {
		b.opt.LeasePools = []netip.Prefix{DefaultPool}
	}
	b.opt.OwnListeners = make([]netip.AddrPort, len(opt.OwnListeners))
	for i, l := range opt.OwnListeners {
		b.opt.OwnListeners[i] = netip.AddrPortFrom(l.Addr().Unmap(), l.Port())
	}
	b.opt.AllowPrivate = append([]netip.Prefix(nil), opt.AllowPrivate...)
	for i, p := range b.opt.AllowPrivate {
		b.opt.AllowPrivate[i] = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p.Addr())).Masked()
	}
	return b
}

// unmapBits is how many prefix bits an IPv4-mapped prefix loses when
// unmapped.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

// Serve starts a listener for the lease on addr (the host side of its veth,
// or 127.0.0.1:0 in tests) that applies policy, and returns the bound
// address. Serving a lease again replaces its policy and closes its open
// tunnels that the new policy no longer admits; addr must then be the
// address already served (port 0 matches any port), else Serve returns an
// ECONFLICT error.
func (b *Broker) Serve(leaseID string, addr netip.AddrPort, policy bothy.EgressPolicy) (netip.AddrPort, error) {
	if err := bothy.ValidateID("lease id", leaseID); err != nil {
		return netip.AddrPort{}, err
	}
	r, err := compilePolicy(policy)
	if err != nil {
		return netip.AddrPort{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shut {
		return netip.AddrPort{}, bothy.Errorf(bothy.EUNAVAILABLE, "egress broker is shut down")
	}
	if l := b.leases[leaseID]; l != nil {
		if addr.Addr().Unmap() != l.addr.Addr() || addr.Port() != 0 && addr.Port() != l.addr.Port() {
			return netip.AddrPort{}, bothy.Errorf(bothy.ECONFLICT, "egress broker: lease %s is already served on %s", leaseID, l.addr)
		}
		l.setRules(r)
		return l.addr, nil
	}
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("egress broker listen: %w", err)
	}
	bound := ln.Addr().(*net.TCPAddr).AddrPort()
	bound = netip.AddrPortFrom(bound.Addr().Unmap(), bound.Port())
	l := &lease{b: b, id: leaseID, addr: bound, sem: make(chan struct{}, b.opt.MaxTunnels), relays: map[*relay]struct{}{}}
	l.rules.Store(r)
	if old := b.closed[leaseID]; old != nil {
		l.bytes.Store(old.bytes.Load())
		delete(b.closed, leaseID)
	}
	l.srv = &http.Server{
		Handler:           l,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(b.log.Handler(), slog.LevelDebug),
	}
	b.leases[leaseID] = l
	go func() {
		if err := l.srv.Serve(newLimitListener(ln, maxConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.log.Error("egress broker stopped serving", "lease", leaseID, "addr", bound, "err", err)
		}
	}()
	return bound, nil
}

// Bytes returns the bytes relayed for the lease so far, both directions,
// request and response headers and bodies included. After Close it keeps
// returning the final count (for the last few thousand closed leases); for
// an unknown lease it returns 0.
func (b *Broker) Bytes(leaseID string) int64 {
	b.mu.Lock()
	l := b.leases[leaseID]
	if l == nil {
		l = b.closed[leaseID]
	}
	b.mu.Unlock()
	if l == nil {
		return 0
	}
	return l.bytes.Load()
}

// Close closes the lease's listener, its client connections and its open
// tunnels. Closing a lease that is not served is not an error.
func (b *Broker) Close(leaseID string) error {
	b.mu.Lock()
	l := b.leases[leaseID]
	if l != nil {
		delete(b.leases, leaseID)
		b.closed[leaseID] = l
		b.closedOrder = append(b.closedOrder, leaseID)
		if len(b.closedOrder) > keepClosed {
			if id := b.closedOrder[0]; b.leases[id] == nil {
				delete(b.closed, id)
			}
			b.closedOrder = b.closedOrder[1:]
		}
	}
	b.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.close()
}

// Shutdown closes every lease; Serve fails afterwards.
func (b *Broker) Shutdown() {
	b.mu.Lock()
	b.shut = true
	ids := make([]string, 0, len(b.leases))
	for id := range b.leases {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	for _, id := range ids {
		b.Close(id)
	}
}

// lease is the listener of one lease and what is open through it.
type lease struct {
	b     *Broker
	id    string
	addr  netip.AddrPort
	rules atomic.Pointer[rules]
	bytes atomic.Int64
	srv   *http.Server
	sem   chan struct{} // one token per open tunnel or exchange

	mu     sync.Mutex
	relays map[*relay]struct{}
	closed bool
}

// relay is one open tunnel (client set) or plain-HTTP exchange (client nil).
type relay struct {
	t        target
	client   net.Conn
	upstream net.Conn
}

func (r *relay) close() {
	if r.client != nil {
		r.client.Close()
	}
	r.upstream.Close()
}

// add registers r; it returns false (and closes r) when the lease is closed.
func (l *lease) add(r *relay) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		r.close()
		return false
	}
	l.relays[r] = struct{}{}
	return true
}

func (l *lease) remove(r *relay) {
	l.mu.Lock()
	delete(l.relays, r)
	l.mu.Unlock()
}

// setRules replaces the policy and cuts the relays it no longer admits.
func (l *lease) setRules(r *rules) {
	l.rules.Store(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	for rel := range l.relays {
		if r.admit(rel.t) != "" {
			rel.close()
			delete(l.relays, rel)
		}
	}
}

func (l *lease) close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	relays := l.relays
	l.relays = nil
	l.mu.Unlock()
	err := l.srv.Close()
	for r := range relays {
		r.close()
	}
	if err != nil {
		return fmt.Errorf("egress broker close lease %s: %w", l.id, err)
	}
	return nil
}

// ServeHTTP parses the destination of a proxy request and relays it.
func (l *lease) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var host, port string
	if r.Method == http.MethodConnect {
		authority := r.URL.Host
		if authority == "" {
			authority = r.Host
		}
		var err error
		if host, port, err = net.SplitHostPort(authority); err != nil {
			l.fail(w, http.StatusBadRequest, "bothy egress: bad request: CONNECT needs HOST:PORT, got %q", authority)
			return
		}
	} else {
		if !r.URL.IsAbs() || r.URL.Host == "" {
			l.fail(w, http.StatusBadRequest, "bothy egress: bad request: this is a proxy; send an absolute URI (set HTTP_PROXY) or use CONNECT")
			return
		} else if r.URL.Scheme != "http" {
			l.fail(w, http.StatusBadRequest, "bothy egress: bad request: only http:// URLs are forwarded; %s:// goes through CONNECT", r.URL.Scheme)
			return
		}
		host, port = r.URL.Hostname(), r.URL.Port()
		if port == "" {
			port = "80"
		}
	}
	t, err := parseTarget(host, port)
	if err != nil {
		l.fail(w, http.StatusBadRequest, "bothy egress: bad request: %v", err)
		return
	}
	select {
	case l.sem <- struct{}{}:
		defer func() { <-l.sem }()
	default:
		l.fail(w, http.StatusServiceUnavailable, "bothy egress: %s: too many open connections for this computer (limit %d)", t, cap(l.sem))
		return
	}
	up, status, reason := l.dial(r.Context(), t)
	if up == nil {
		verb := "denied"
		if status != http.StatusForbidden {
			verb = "cannot reach"
		}
		l.b.log.Info("egress "+verb, "lease", l.id, "dest", t.String(), "reason", reason)
		l.fail(w, status, "bothy egress: %s %s: %s", verb, t, reason)
		return
	}
	up = &countingConn{Conn: up, n: &l.bytes}
	if r.Method == http.MethodConnect {
		l.tunnel(w, t, up)
	} else {
		l.forward(w, r, t, up)
	}
}

func (l *lease) fail(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	fmt.Fprintf(w, format+"\n", args...)
}

package bothy

import (
	"net/netip"
	"slices"
	"strings"
)

// Policy is a server's policy, read from its configuration file (bothy
// serve --policy FILE) or built from its flags: which provider serves each
// profile, every lease's limits, and the private address ranges the
// egress broker may admit. Callers never name providers: they ask for a
// profile, and a profile no provider serves is refused, never served by
// another. Its digest is stated in every receipt.
type Policy struct {
	// Profiles maps a profile to the provider that serves it.
	Profiles map[string]string `json:"profiles"`
	// Limits are every lease's limits; ScratchBytes is lowered per computer
	// to its creator's bytes budget.
	Limits Limits `json:"limits"`
	// EgressAllowPrivate lists CIDR prefixes whose addresses the egress
	// broker admits although they are loopback or private. The cloud
	// metadata address is denied whatever this says.
	EgressAllowPrivate []string `json:"egress_allow_private,omitempty"`
	// CommandTimeoutMS is the timeout of a command whose run gives none
	// (RunRequest.TimeoutMS), in milliseconds; 0 is none.
	CommandTimeoutMS int64 `json:"command_timeout_ms,omitempty"`
	// CacheBytes bounds each agent's host cache of materialized
	// revisions: past it, the least recently used trees that no lease
	// uses are evicted. 0 is DefaultCacheBytes.
	CacheBytes int64 `json:"cache_bytes,omitempty"`
}

// DefaultCacheBytes is the host cache's bound when the policy sets none.
const DefaultCacheBytes = 10 << 30

// CacheLimit returns CacheBytes, or DefaultCacheBytes when it is 0.
func (p *Policy) CacheLimit() int64 {
	if p == nil || p.CacheBytes == 0 {
		return DefaultCacheBytes
	}
	return p.CacheBytes
}

// Validate reports whether p is usable: at least one profile, each with a
// provider, limits and the command timeout not negative, and well-formed
// prefixes.
func (p *Policy) Validate() error {
	if len(p.Profiles) == 0 {
		return Errorf(EINVALID, "policy: at least one profile is needed")
	}
	for name, prov := range p.Profiles {
		if err := ValidateID("profile", name); err != nil {
			return Errorf(EINVALID, "policy: %s", ErrorMessage(err))
		} else if prov == "" {
			return Errorf(EINVALID, "policy: profile %q names no provider", name)
		}
	}
	l := p.Limits
	if l.MemoryBytes < 0 || l.Pids < 0 || l.CPUMillis < 0 || l.ScratchBytes < 0 || l.OpenFiles < 0 {
		return Errorf(EINVALID, "policy: limits must not be negative")
	} else if p.CommandTimeoutMS < 0 {
		return Errorf(EINVALID, "policy: command_timeout_ms must not be negative")
	} else if p.CacheBytes < 0 {
		return Errorf(EINVALID, "policy: cache_bytes must not be negative")
	}
	_, err := p.AllowPrivate()
	return err
}

// LeasePool is the range that lease networks take their addresses from
// (egress.DefaultPool): the broker never admits it, and a policy may not
// allow it.
var LeasePool = netip.MustParsePrefix("10.200.0.0/16")

// AllowPrivate parses EgressAllowPrivate (ParseAllowPrivate).
func (p *Policy) AllowPrivate() ([]netip.Prefix, error) {
	return ParseAllowPrivate(p.EgressAllowPrivate)
}

// ParseAllowPrivate parses the CIDR prefixes the egress broker may admit
// although private (Policy.EgressAllowPrivate), masked; a prefix that is
// malformed or overlaps LeasePool is EINVALID.
func ParseAllowPrivate(prefixes []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range prefixes {
		pfx, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, Errorf(EINVALID, "policy: egress_allow_private %q is not a CIDR prefix like 192.168.10.0/24", s)
		}
		if pfx.Masked().Overlaps(LeasePool) {
			return nil, Errorf(EINVALID, "policy: egress_allow_private %s overlaps the lease networks' %s, which no lease may reach", s, LeasePool)
		}
		out = append(out, pfx.Masked())
	}
	return out, nil
}

// Addresses through which a connection reaches this host's loopback: the
// loopback ranges, also IPv4-mapped, and the unspecified addresses, which
// the kernel sends to loopback.
var reachLoopback = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::ffff:127.0.0.0/104"), netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("0.0.0.0/32"), netip.MustParsePrefix("::/128"), netip.MustParsePrefix("::ffff:0.0.0.0/128"),
}

// AllowPrivateLoopback returns the prefixes of allow (ParseAllowPrivate)
// that admit a loopback address of this host or the unspecified address,
// through which a sandbox's broker reaches every service listening on the
// host's loopback; the broker still denies bothy's own listeners. `bothy
// serve` and `bothy agent` warn at start when it returns any.
func AllowPrivateLoopback(allow []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range allow {
		if slices.ContainsFunc(reachLoopback, p.Overlaps) {
			out = append(out, p)
		}
	}
	return out
}

// ProfileNames returns the profiles, sorted.
func (p *Policy) ProfileNames() []string {
	names := make([]string, 0, len(p.Profiles))
	for name := range p.Profiles {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/bothyhq/bothy"
)

// target is the destination of one request, parsed and normalized.
type target struct {
	host string     // lowercased name without a trailing dot, or an IP literal
	ip   netip.Addr // set when host is an IP literal (unmapped)
	port uint16
}

// String returns HOST:PORT, with brackets around an IPv6 literal.
func (t target) String() string { return net.JoinHostPort(t.host, strconv.Itoa(int(t.port))) }

// parseTarget parses the host and port of a request. It returns an error
// fit for a 400 answer when they are malformed.
func parseTarget(host, port string) (target, error) {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || port[0] == '+' || port[0] == '0' {
		return target{}, fmt.Errorf("bad port %q", port)
	}
	t := target{host: host, port: uint16(n)}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return target{}, fmt.Errorf("bad host %q: an address with a zone", host)
		}
		t.ip = a.Unmap()
		t.host = t.ip.String()
		return t, nil
	}
	if strings.HasPrefix(host, "*") {
		return target{}, fmt.Errorf("bad host %q", host)
	} else if _, _, err := bothy.ParseEgressPattern(host + ":1"); err != nil {
		return target{}, fmt.Errorf("bad host %q", host)
	}
	return t, nil
}

// rule is one compiled allow pattern.
type rule struct {
	name     string     // exact name, or the parent domain of a wildcard
	wildcard bool       // "*.name": every subdomain of name, not name itself
	ip       netip.Addr // an IP literal pattern (unmapped)
	port     uint16     // 0: any port
}

// rules is a compiled policy; it is immutable once built.
type rules struct {
	mode  string
	allow []rule
}

func compilePolicy(p bothy.EgressPolicy) (*rules, error) {
	p.Allow = append([]string(nil), p.Allow...)
	p.Normalize()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	r := &rules{mode: p.Mode}
	for _, a := range p.Allow {
		host, port, err := bothy.ParseEgressPattern(a)
		if err != nil {
			return nil, err
		}
		ru := rule{port: uint16(port)}
		if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
			if ip.Zone() != "" {
				return nil, bothy.Errorf(bothy.EINVALID, "egress pattern %q: an address with a zone", a)
			}
			ru.ip = ip.Unmap()
		} else if name, ok := strings.CutPrefix(host, "*."); ok {
			ru.name, ru.wildcard = name, true
		} else {
			ru.name = host
		}
		r.allow = append(r.allow, ru)
	}
	return r, nil
}

// admit returns "" when the policy admits t, else the reason of the denial.
func (r *rules) admit(t target) string {
	switch r.mode {
	case bothy.EgressAll:
		return ""
	case bothy.EgressAllowlist:
		for _, ru := range r.allow {
			if ru.port != 0 && ru.port != t.port {
				continue
			}
			switch {
			case ru.ip.IsValid():
				if t.ip == ru.ip {
					return ""
				}
			case t.ip.IsValid():
			case ru.wildcard:
				if strings.HasSuffix(t.host, "."+ru.name) {
					return ""
				}
			case t.host == ru.name:
				return ""
			}
		}
		return "not on this computer's allowlist"
	default:
		return "egress is off for this computer (mode none)"
	}
}

// Addresses the broker never dials, whatever AllowPrivate says: the cloud
// metadata services (AWS, GCP and Azure use the IPv4 one, AWS Nitro the
// IPv6 one).
var metadataAddrs = []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")}

var (
	cgnat       = netip.MustParsePrefix("100.64.0.0/10")
	thisNet     = netip.MustParsePrefix("0.0.0.0/8")
	reserved4   = netip.MustParsePrefix("240.0.0.0/4")
	ietf4       = netip.MustParsePrefix("192.0.0.0/24")
	siteLocal6  = netip.MustParsePrefix("fec0::/10")
	v4compat6   = netip.MustParsePrefix("::/96")
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour   = netip.MustParsePrefix("2002::/16")
	teredoSpace = netip.MustParsePrefix("2001::/32")
)

// addrClass returns why a must not be dialed ("a loopback address", ...),
// or "" for an ordinary public address. It looks inside IPv6 forms that
// carry an IPv4 address (mapped, NAT64, 6to4) so that they cannot smuggle
// a private IPv4 address past the check.
func addrClass(a netip.Addr) string {
	a = a.Unmap()
	for _, m := range metadataAddrs {
		if a == m {
			return "the cloud metadata address"
		}
	}
	switch {
	case !a.IsValid():
		return "an invalid address"
	case a.IsLoopback():
		return "a loopback address"
	case a.IsUnspecified() || thisNet.Contains(a):
		return "an unspecified address"
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	case a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "a multicast or broadcast address"
	case a.IsPrivate() || siteLocal6.Contains(a):
		return "a private address"
	case cgnat.Contains(a):
		return "a shared (CGNAT) address"
	case reserved4.Contains(a) || ietf4.Contains(a) || v4compat6.Contains(a) || teredoSpace.Contains(a) || nat64Local.Contains(a):
		return "a reserved address"
	case nat64.Contains(a):
		b := a.As16()
		if c := addrClass(netip.AddrFrom4([4]byte(b[12:16]))); c != "" {
			return c + " (through NAT64)"
		}
	case sixToFour.Contains(a):
		b := a.As16()
		if c := addrClass(netip.AddrFrom4([4]byte(b[2:6]))); c != "" {
			return c + " (through 6to4)"
		}
	}
	return ""
}

func isMetadata(a netip.Addr) bool {
	a = a.Unmap()
	for _, m := range metadataAddrs {
		if a == m {
			return true
		}
	}
	return false
}

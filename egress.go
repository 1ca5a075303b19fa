package bothy

import (
	"net/netip"
	"strconv"
	"strings"
)

// Egress modes: what a computer's commands may reach on the network.
const (
	// EgressNone is the default: the sandbox has only a loopback
	// interface.
	EgressNone = "none"
	// EgressAllowlist admits, through the egress broker, only the
	// destinations that match the policy's Allow patterns.
	EgressAllowlist = "allowlist"
	// EgressAll admits every destination through the broker, except the
	// addresses the broker always blocks (loopback, private ranges and the
	// cloud metadata address, unless the server allows them).
	EgressAll = "all"
)

// MaxEgressAllow bounds the number of patterns of an allowlist.
const MaxEgressAllow = 256

// EgressPolicy is a computer's egress policy. The zero value is EgressNone.
type EgressPolicy struct {
	Mode string `json:"mode"`
	// Allow holds HOST:PORT patterns (allowlist only). HOST is a DNS name,
	// "*.NAME" for every subdomain of NAME (not NAME itself), an IPv4
	// address or a bracketed IPv6 address; PORT is a number or "*".
	Allow []string `json:"allow,omitempty"`
}

// Normalize fills the default mode and lowercases the patterns.
func (p *EgressPolicy) Normalize() {
	if p.Mode == "" {
		p.Mode = EgressNone
	}
	for i, a := range p.Allow {
		p.Allow[i] = strings.ToLower(a)
	}
}

// Validate reports whether p is a well-formed policy.
func (p *EgressPolicy) Validate() error {
	switch p.Mode {
	case "", EgressNone, EgressAll:
		if len(p.Allow) > 0 {
			return Errorf(EINVALID, "egress allow patterns need mode %q", EgressAllowlist)
		}
		return nil
	case EgressAllowlist:
	default:
		return Errorf(EINVALID, "egress mode %q is not one of none, allowlist, all", p.Mode)
	}
	if len(p.Allow) == 0 {
		return Errorf(EINVALID, "egress mode allowlist needs at least one HOST:PORT pattern")
	} else if len(p.Allow) > MaxEgressAllow {
		return Errorf(EINVALID, "an egress allowlist holds at most %d patterns", MaxEgressAllow)
	}
	for _, a := range p.Allow {
		if _, _, err := ParseEgressPattern(a); err != nil {
			return err
		}
	}
	return nil
}

// ParseEgressPattern splits an allow pattern into its host and its port
// (0 for "*"). The host is lowercased; a subdomain wildcard keeps its
// leading "*.".
func ParseEgressPattern(pattern string) (host string, port int, err error) {
	bad := func(why string) (string, int, error) {
		return "", 0, Errorf(EINVALID, "egress pattern %q: %s (want HOST:PORT, *.DOMAIN:PORT or IP:PORT; PORT may be *)", pattern, why)
	}
	i := strings.LastIndexByte(pattern, ':')
	if i < 0 {
		return bad("no port")
	}
	host, ps := strings.ToLower(pattern[:i]), pattern[i+1:]
	if ps != "*" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return bad("port must be 1 to 65535 or *")
		}
		port = n
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		a, err := netip.ParseAddr(host[1 : len(host)-1])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return bad("bad IPv6 address")
		}
		return host, port, nil
	}
	if _, err := netip.ParseAddr(host); err == nil {
		if strings.Contains(host, ":") {
			return bad("an IPv6 address must be in brackets")
		}
		return host, port, nil
	}
	name := strings.TrimPrefix(host, "*.")
	if name == "" || len(name) > 253 || strings.Contains(name, "*") {
		return bad("bad host name")
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return bad("bad host name")
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return bad("bad host name")
			}
		}
	}
	return host, port, nil
}

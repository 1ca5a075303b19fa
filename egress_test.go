package bothy_test

import (
	"testing"

	"github.com/bothyhq/bothy"
)

func TestEgressPolicy_Validate(t *testing.T) {
	good := []bothy.EgressPolicy{
		{}, {Mode: "none"}, {Mode: "all"},
		{Mode: "allowlist", Allow: []string{"example.com:443", "*.example.com:*", "10.0.0.1:80", "[::1]:8080", "a_b.c:1"}},
	}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	bad := []bothy.EgressPolicy{
		{Mode: "some"}, {Mode: "all", Allow: []string{"a:1"}}, {Mode: "allowlist"},
		{Mode: "allowlist", Allow: []string{"example.com"}}, {Mode: "allowlist", Allow: []string{"example.com:0"}},
		{Mode: "allowlist", Allow: []string{"example.com:70000"}}, {Mode: "allowlist", Allow: []string{"*:80"}},
		{Mode: "allowlist", Allow: []string{"a.*.com:80"}}, {Mode: "allowlist", Allow: []string{"::1:80"}},
		{Mode: "allowlist", Allow: []string{"-a.com:80"}}, {Mode: "allowlist", Allow: []string{"a..com:80"}},
		{Mode: "allowlist", Allow: []string{"a b.com:80"}}, {Mode: "allowlist", Allow: []string{":80"}},
	}
	for _, p := range bad {
		if err := p.Validate(); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Errorf("%+v: got %v, want EINVALID", p, err)
		}
	}
}

func TestParseEgressPattern(t *testing.T) {
	host, port, err := bothy.ParseEgressPattern("*.Example.COM:*")
	if err != nil || host != "*.example.com" || port != 0 {
		t.Fatalf("got %q %d %v", host, port, err)
	}
	host, port, err = bothy.ParseEgressPattern("[::1]:443")
	if err != nil || host != "[::1]" || port != 443 {
		t.Fatalf("got %q %d %v", host, port, err)
	}
}

package bothy_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
)

func TestPrincipal_Authority(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scopes []string
		want   bothy.Authority
	}{
		{"plain", []string{"computers:read"}, bothy.Authority{Profiles: []string{"standard"}, Egress: "none"}},
		{"admin", []string{"admin"}, bothy.Authority{Profiles: []string{"*"}, Egress: "all", Secrets: []string{"*"}}},
		{"scoped", []string{"profile:strong", "profile:gpu", "egress:allowlist", "secret:gh", "secret:npm", "budget:bytes=1024", "budget:cpu-seconds=9"},
			bothy.Authority{Profiles: []string{"gpu", "strong"}, Egress: "allowlist", Secrets: []string{"gh", "npm"}, Budget: bothy.Budget{CPUSeconds: 9, Bytes: 1024}}},
		{"widest egress wins", []string{"egress:all", "egress:allowlist"}, bothy.Authority{Profiles: []string{"standard"}, Egress: "all"}},
		{"every secret", []string{"secret:gh", "secret:*"}, bothy.Authority{Profiles: []string{"standard"}, Egress: "none", Secrets: []string{"*"}}},
	} {
		p := &bothy.Principal{TenantID: "t", Scopes: tc.scopes}
		if got := p.Authority(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	a := (&bothy.Principal{Scopes: []string{"secret:gh", "egress:allowlist"}}).Authority()
	if !a.CanUseSecret("gh") || a.CanUseSecret("npm") || !a.CanUseEgress("allowlist") || a.CanUseEgress("all") || !a.CanUseEgress("") {
		t.Errorf("checks of %+v are wrong", a)
	}
	b := (&bothy.Principal{Scopes: []string{"egress:allowlist", "secret:gh"}}).Authority()
	c := (&bothy.Principal{Scopes: []string{"secret:gh"}}).Authority()
	if a.Digest() != b.Digest() || a.Digest() == c.Digest() {
		t.Error("the digest does not follow the authority alone")
	}
}

func TestAdmitRun(t *testing.T) {
	comp := &bothy.Computer{ID: "c", Profile: "strong", Authority: &bothy.Authority{Budget: bothy.Budget{WallSeconds: 10, CPUSeconds: 1}}}
	plain := (&bothy.Principal{Scopes: []string{"computers:write"}}).Authority()
	if err := bothy.AdmitRun(comp, &bothy.RunRequest{Authority: &plain}); bothy.ErrorCode(err) != bothy.EFORBIDDEN {
		t.Errorf("a standard-only caller on a strong computer: %v", err)
	}
	strong := (&bothy.Principal{Scopes: []string{"profile:strong", "budget:wall-seconds=3"}}).Authority()
	req := &bothy.RunRequest{Authority: &strong, TimeoutMS: 60000}
	if err := bothy.AdmitRun(comp, req); err != nil || req.TimeoutMS != 3000 {
		t.Errorf("admit: %v, timeout %d, want 3000 (the caller's budget is lower)", err, req.TimeoutMS)
	}
	req = &bothy.RunRequest{}
	if err := bothy.AdmitRun(comp, req); err != nil || req.TimeoutMS != 10000 {
		t.Errorf("admit without timeout: %v, timeout %d, want 10000", err, req.TimeoutMS)
	}
	comp.Usage.CPUMicros = 1_000_000
	if err := bothy.AdmitRun(comp, &bothy.RunRequest{}); bothy.ErrorCode(err) != bothy.EFORBIDDEN {
		t.Errorf("spent CPU budget: %v", err)
	}
	if got := bothy.ScratchBytes(&bothy.Computer{Authority: &bothy.Authority{Budget: bothy.Budget{Bytes: 5}}}, 100); got != 5 {
		t.Errorf("scratch %d, want 5", got)
	}
	if got := bothy.ScratchBytes(&bothy.Computer{}, 100); got != 100 {
		t.Errorf("scratch %d, want 100", got)
	}
}

func TestAllowPrivateLoopback(t *testing.T) {
	for in, want := range map[string]string{
		"":                             "",
		"192.168.0.0/16,10.1.0.0/16":   "",
		"127.0.0.0/8":                  "127.0.0.0/8",
		"127.0.0.5/32,192.168.0.0/16":  "127.0.0.5/32",
		"0.0.0.0/8":                    "0.0.0.0/8",
		"0.0.0.0/32":                   "0.0.0.0/32",
		"::1/128,fd00::/8":             "::1/128",
		"::/0":                         "::/0",
		"::ffff:127.0.0.0/104":         "::ffff:127.0.0.0/104",
		"::ffff:0.0.0.0/96":            "::ffff:0.0.0.0/96",
		"128.0.0.0/1,fd00::/8,::2/128": "",
	} {
		var prefixes []string
		if in != "" {
			prefixes = strings.Split(in, ",")
		}
		allow, err := bothy.ParseAllowPrivate(prefixes)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		var got []string
		for _, p := range bothy.AllowPrivateLoopback(allow) {
			got = append(got, p.String())
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%q: loopback prefixes %q, want %q", in, got, want)
		}
	}
}

func TestPolicy_Validate(t *testing.T) {
	p := bothy.Policy{Profiles: map[string]string{"strong": "gvisor", "standard": "bwrap"}, EgressAllowPrivate: []string{"192.168.7.3/16"}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if pf, _ := p.AllowPrivate(); pf[0].String() != "192.168.0.0/16" {
		t.Errorf("prefix %v, want it masked", pf)
	}
	if names := p.ProfileNames(); !reflect.DeepEqual(names, []string{"standard", "strong"}) {
		t.Errorf("names %q", names)
	}
	for _, bad := range []bothy.Policy{
		{}, {Profiles: map[string]string{"a/b": "bwrap"}}, {Profiles: map[string]string{"a": ""}},
		{Profiles: map[string]string{"a": "bwrap"}, Limits: bothy.Limits{ScratchBytes: -1}},
		{Profiles: map[string]string{"a": "bwrap"}, EgressAllowPrivate: []string{"nope"}},
		// The lease networks are never reachable through the broker.
		{Profiles: map[string]string{"a": "bwrap"}, EgressAllowPrivate: []string{"10.0.0.0/8"}},
		{Profiles: map[string]string{"a": "bwrap"}, EgressAllowPrivate: []string{"10.200.3.0/24"}},
	} {
		if err := bad.Validate(); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

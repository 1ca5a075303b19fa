package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
)

// TestRunConfig_Policy: the policy comes from the flags or from a file,
// never from both; a file with an unknown field, an unknown provider or
// the process provider without --allow-process is refused.
func TestRunConfig_Policy(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	parse := func(args ...string) (*bothy.Policy, error) {
		var rc runConfig
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		rc.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return rc.policy(fs)
	}

	p, err := parse("--profiles", "standard=bwrap,strong=gvisor", "--lease-scratch", "1GiB", "--egress-allow-private", "198.51.100.0/24")
	if err != nil {
		t.Fatal(err)
	}
	if p.Profiles["strong"] != "gvisor" || p.Limits.ScratchBytes != 1<<30 || p.Limits.MemoryBytes != 2<<30 || p.Limits.OpenFiles != 1024 || p.CommandTimeoutMS != 3600000 || len(p.EgressAllowPrivate) != 1 {
		t.Errorf("policy from flags: %+v", p)
	}
	if p.CacheLimit() != 10<<30 {
		t.Errorf("default cache_bytes %d, want 10 GiB", p.CacheLimit())
	}
	if p, err := parse("--cache-bytes", "2GiB"); err != nil || p.CacheBytes != 2<<30 {
		t.Errorf("--cache-bytes 2GiB: %+v, %v", p, err)
	}

	good := write("good.json", `{"profiles": {"standard": "bwrap"}, "limits": {"memory_bytes": 1073741824, "scratch_bytes": 5000000, "nofile": 4096}, "egress_allow_private": ["10.9.0.0/16"], "command_timeout_ms": 60000}`)
	if p, err = parse("--policy", good); err != nil {
		t.Fatal(err)
	} else if p.Limits.MemoryBytes != 1<<30 || p.Limits.ScratchBytes != 5000000 || p.Limits.OpenFiles != 4096 || p.CommandTimeoutMS != 60000 || p.EgressAllowPrivate[0] != "10.9.0.0/16" {
		t.Errorf("policy from file: %+v", p)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"file and flag", []string{"--policy", good, "--lease-memory", "1GiB"}, "--lease-memory"},
		{"unknown field", []string{"--policy", write("unknown.json", `{"profiles": {"standard": "bwrap"}, "limit": {}}`)}, "unknown field"},
		{"unknown provider", []string{"--policy", write("prov.json", `{"profiles": {"standard": "docker"}}`)}, "unknown provider"},
		{"process", []string{"--policy", write("proc.json", `{"profiles": {"standard": "process"}}`)}, "--allow-process"},
		{"no profile", []string{"--policy", write("empty.json", `{"profiles": {}}`)}, "at least one profile"},
		{"few files", []string{"--lease-nofile", "32"}, "--lease-nofile"},
		{"negative files", []string{"--policy", write("nofile.json", `{"profiles": {"standard": "bwrap"}, "limits": {"nofile": -1}}`)}, "negative"},
		{"file and timeout", []string{"--policy", good, "--command-timeout", "1m"}, "--command-timeout"},
		{"negative timeout", []string{"--command-timeout", "-1s"}, "--command-timeout"},
		{"negative policy timeout", []string{"--policy", write("timeout.json", `{"profiles": {"standard": "bwrap"}, "command_timeout_ms": -1}`)}, "command_timeout_ms"},
		{"bad prefix", []string{"--egress-allow-private", "10.0.0.1"}, "CIDR"},
		{"missing file", []string{"--policy", filepath.Join(dir, "nope.json")}, "no such file"},
	} {
		_, err := parse(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}

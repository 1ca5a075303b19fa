package bwrap_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/providertest"
)

// BenchmarkExecTrue measures `true` through Exec: trampoline, cgroups,
// setpriv and bwrap. Compare with BenchmarkPlainBwrapTrue.
func BenchmarkExecTrue(b *testing.B) {
	p, err := newProviderB()
	if err != nil {
		b.Skip(err)
	}
	h, _ := providertest.Start(b, p, bothy.LeaseSpec{})
	for b.Loop() {
		if res, err := p.Exec(context.Background(), h, bothy.ExecSpec{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkPlainBwrapTrue is the baseline: bwrap started by root with the
// same mounts, without cgroups or setpriv.
func BenchmarkPlainBwrapTrue(b *testing.B) {
	ws := b.TempDir()
	for b.Loop() {
		cmd := exec.Command("bwrap", "--unshare-all", "--die-with-parent", "--new-session",
			"--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
			"--symlink", "usr/lib64", "/lib64", "--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev",
			"--tmpfs", "/tmp", "--bind", ws, "/workspace", "--chdir", "/workspace", "--hostname", "bothy", "true")
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

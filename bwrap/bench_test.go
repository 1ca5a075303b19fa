package bwrap_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/hostcache"
	"github.com/bothyhq/bothy/providertest"
	"github.com/bothyhq/bothy/testenv"
)

// BenchmarkExecTrue measures `true` through Exec into a running sandbox:
// the enter program (cgroups, namespaces, uid, seccomp filter), the bash
// wrapper and the command. Compare with BenchmarkPlainBwrapTrue.
func BenchmarkExecTrue(b *testing.B) {
	p, err := newProviderB()
	if err != nil {
		testenv.Skip(b, "%v", err)
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

// BenchmarkStartOverlay times Mount+Start over an overlay of a 10,000-file
// workspace (100 directories of 100 files of 4 KiB). "chown": the lower
// layer is the cached tree, owned by root, and Start chowns every file
// through the overlay, which copies each one up. "idmap": the lower layer
// is idmapped to the lease's uid and Start chowns nothing. Stop and the
// removal of the layers are not timed.
func BenchmarkStartOverlay(b *testing.B) {
	p, err := newProviderB()
	if err != nil {
		testenv.Skip(b, "%v", err)
	}
	lower := writeLower(b, 100, 100, 4096)
	for _, idmap := range []bool{false, true} {
		name := map[bool]string{false: "chown", true: "idmap"}[idmap]
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			var upper int
			for b.Loop() {
				id := providertest.NewID("lease")
				var opts hostcache.MountOptions
				if idmap {
					uid, err := p.WorkspaceUID(ctx, id)
					if err != nil {
						b.Fatal(err)
					}
					opts.IDMapUID = uid
				}
				ov, err := hostcache.Mount(ctx, lower, b.TempDir(), opts)
				if err != nil || ov.IDMapped != idmap {
					b.Fatal(err, ov.IDMapErr)
				}
				h, err := p.Start(ctx, bothy.LeaseSpec{LeaseID: id, ComputerID: "c1", Generation: 1, Workspace: ov.Merged})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				upper = len(countTree(b, ov.Upper))
				if res, err := p.Stop(ctx, h); err != nil {
					b.Fatal(res, err)
				}
				if err := ov.Remove(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(upper), "upper-entries")
		})
	}
}

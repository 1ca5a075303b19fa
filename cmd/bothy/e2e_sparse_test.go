package main

import (
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
)

// TestE2E_SparseScratch: sparse files count against the scratch limit by
// their apparent size. Five 40 MiB truncates under a 64 MiB limit get the
// command cancelled disk_limited, like real writes; one truncate past the
// limit fails at once (RLIMIT_FSIZE: EFBIG and SIGXFSZ).
func TestE2E_SparseScratch(t *testing.T) {
	needSandbox(t)
	data, s, a := serveAPI(t, "--lease-scratch", "64MiB")
	c := a.create("sparse")
	many := a.run(c.ID, bothy.RunRequest{
		Script:    "for i in 1 2 3 4 5; do truncate -s 40M s$i; sleep 1.5; done; echo finished",
		TimeoutMS: 60000, Wait: true,
	})
	many = a.wait(many.ID)
	if got := output(a.events(many.ID, 0, nil)); !many.DiskLimited || many.State == bothy.CommandTimedOut || strings.Contains(got, "finished") {
		t.Errorf("five sparse 40 MiB files under 64 MiB: %s exit %v disk_limited %v output %q", many.State, many.ExitCode, many.DiskLimited, got)
	}
	one := a.run(c.ID, bothy.RunRequest{Script: "rm -f s*; truncate -s 100M big; echo truncate=$?; ls -l big 2>&1", Wait: true})
	one = a.wait(one.ID)
	// 153 = 128 + SIGXFSZ: the kernel refuses the size (EFBIG) and
	// signals truncate, which leaves the file empty.
	if got := output(a.events(one.ID, 0, nil)); !strings.HasPrefix(got, "truncate=153\n-rw-r--r-- 1 bothy bothy 0 ") {
		t.Errorf("one sparse file past the limit: %s output %q stderr %q", one.State, got, stderr(a.events(one.ID, 0, nil)))
	}
	destroyAll(t, a, data)
	s.stop(t)
}

package providertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/testenv"
)

// busyLoop is a perl program that spends a fixed amount of CPU time (about
// a second on the project's machines) in one thread and no system call:
// its cost does not depend on what else runs, nor on the kernel (gVisor's
// clock, unlike the host's, counts the time a guest waited for a CPU).
const busyLoop = `$i = 0; $i++ while $i < 6e7`

// BusyScript is a command that runs busyLoop. It exits 77 if the sandbox
// has no perl.
const BusyScript = "command -v perl >/dev/null || exit 77\nexec perl -e '" + busyLoop + "'"

// AllocScript is a command that holds 100 MiB of memory for a second. It
// exits 77 if the sandbox has no perl.
const AllocScript = `command -v perl >/dev/null || exit 77
exec perl -e '$x = "x" x (100 * 1024 * 1024); sleep 1'`

// testUsage checks a command's Usage against what it is known to consume.
// The provider's own tests compare it with the host's accounting.
func testUsage(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	p := newProvider(t)
	h, _ := Start(t, p, bothy.LeaseSpec{})

	t.Run("CPU", func(t *testing.T) {
		host := hostCPU(t, busyLoop)
		res, _, errOut := Exec(t, p, h, bothy.ExecSpec{Script: BusyScript})
		if res.ExitCode == 77 {
			testenv.Skip(t, "no perl in the sandbox")
		}
		wantExit(t, res, 0)
		u := res.Usage
		t.Logf("usage %+v; the loop took %v of CPU on the host", u, host)
		if u.WallMillis != res.Duration.Milliseconds() {
			t.Errorf("WallMillis %d, want the duration %v", u.WallMillis, res.Duration)
		}
		// The sandbox's accounting may add its own work (gVisor's sentry),
		// but no more than the CPUs can give in the wall time.
		cpu := time.Duration(u.CPUMicros) * time.Microsecond
		most := res.Duration*time.Duration(runtime.NumCPU())*11/10 + 100*time.Millisecond
		if cpu < host/2 || cpu > most {
			t.Fatalf("CPU time %v for a loop that takes %v on the host, in %v of wall time (usage %+v, stderr %q)", cpu, host, res.Duration, u, errOut)
		}
	})
	t.Run("Memory", func(t *testing.T) {
		res, _, errOut := Exec(t, p, h, bothy.ExecSpec{Script: AllocScript})
		if res.ExitCode == 77 {
			testenv.Skip(t, "no perl")
		}
		wantExit(t, res, 0)
		u := res.Usage
		t.Logf("usage %+v", u)
		if u.PeakMemoryBytes < 90<<20 {
			t.Fatalf("PeakMemoryBytes %d for 100 MiB held (usage %+v, stderr %q)", u.PeakMemoryBytes, u, errOut)
		}
		// 90 MiB for at least half of the second it was held, and never
		// more than the peak for the whole wall time.
		if least, most := int64(45<<20), int64(float64(u.PeakMemoryBytes)*res.Duration.Seconds()*1.01)+1<<20; u.MemoryByteSeconds < least || u.MemoryByteSeconds > most {
			t.Fatalf("MemoryByteSeconds %d, want %d to %d (usage %+v)", u.MemoryByteSeconds, least, most, u)
		}
	})
}

// testLeaseMeter checks a bothy.LeaseMeter, whose figures are the cgroup
// accounting of the sandbox: a CPU-bound command's CPUMicros is within
// 20% of what the lease's accounting grew by while it ran (the sandbox's
// own work, such as gVisor's sentry, counts there too), and CPU spent by
// a process that outlives its command shows in the lease's usage, not
// the command's.
func testLeaseMeter(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	p := newProvider(t)
	m, ok := p.(bothy.LeaseMeter)
	if !ok {
		t.Logf("the provider is no LeaseMeter: nothing to check")
		return
	}
	h, _ := Start(t, p, bothy.LeaseSpec{})
	usage := func() int64 {
		t.Helper()
		u, err := m.LeaseUsage(t.Context(), h)
		if err != nil {
			t.Fatal(err)
		}
		return u.CPUMicros
	}
	cpu0 := usage()
	busy, _, _ := Exec(t, p, h, bothy.ExecSpec{Script: BusyScript})
	if busy.ExitCode == 77 {
		testenv.Skip(t, "no perl")
	}
	delta := usage() - cpu0
	if busy.ExitCode != 0 || delta < 100_000 {
		t.Fatalf("result %+v, the lease's accounting grew by %d µs", busy, delta)
	}
	if d := busy.Usage.CPUMicros - delta; d > delta/5 || d < -delta/5 {
		t.Fatalf("CPUMicros %d, the lease's cgroup accounting says %d µs", busy.Usage.CPUMicros, delta)
	}

	before, err := m.LeaseUsage(t.Context(), h)
	if err != nil {
		t.Fatal(err)
	}
	res, _, errOut := Exec(t, p, h, bothy.ExecSpec{Script: "command -v perl >/dev/null || exit 77; (perl -e 'alarm 1; 1 while 1' &); echo started"})
	if res.ExitCode == 77 {
		testenv.Skip(t, "no perl")
	}
	wantExit(t, res, 0)
	time.Sleep(1500 * time.Millisecond) // the loop runs out its second
	after, err := m.LeaseUsage(t.Context(), h)
	if err != nil {
		t.Fatal(err)
	}
	beyond := after.CPUMicros - before.CPUMicros - res.Usage.CPUMicros
	t.Logf("lease CPU %d → %d µs, the command's %d µs (stderr %q)", before.CPUMicros, after.CPUMicros, res.Usage.CPUMicros, errOut)
	// A second of a busy loop, on a shared host: at least a fifth of it.
	if beyond < 200_000 {
		t.Fatalf("the lease's usage shows %d µs beyond its command's for a 1 s background loop", beyond)
	}
}

// hostCPU returns the CPU time, user and system, of a perl program run on
// the host, or skips the test without perl.
func hostCPU(t *testing.T, program string) time.Duration {
	t.Helper()
	cmd := exec.Command("perl", "-e", program)
	if err := cmd.Run(); err != nil {
		testenv.Skip(t, "no perl on the host to measure with: %v", err)
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// testScratch checks Limits.ScratchBytes as the bound on one file's size.
func testScratch(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	p := newProvider(t)
	const limit = 10 << 20
	h, ws := Start(t, p, bothy.LeaseSpec{Limits: bothy.Limits{ScratchBytes: limit}})

	t.Run("UnderLimit", func(t *testing.T) {
		res, _, errOut := Exec(t, p, h, bothy.ExecSpec{Script: "head -c 5242880 /dev/zero > small"})
		if res.ExitCode != 0 || res.DiskLimited {
			t.Fatalf("writing 5 MiB under a 10 MiB limit: result %+v stderr %q", res, errOut)
		}
		if fi, err := os.Stat(filepath.Join(ws, "small")); err != nil || fi.Size() != 5<<20 {
			t.Fatalf("the 5 MiB file: %v", err)
		}
	})
	t.Run("DiskLimited", func(t *testing.T) {
		// dd does not handle SIGXFSZ, so the write past the limit kills it.
		res, _, errOut := Exec(t, p, h, bothy.ExecSpec{Script: "dd if=/dev/zero of=big bs=1M count=100"})
		if !res.DiskLimited || res.ExitCode == 0 {
			t.Fatalf("writing 100 MiB under a 10 MiB limit: result %+v stderr %q, want DiskLimited", res, errOut)
		}
		fi, err := os.Stat(filepath.Join(ws, "big"))
		if err != nil || fi.Size() > limit {
			t.Fatalf("the file written past the limit: %v, %v", fi.Size(), err)
		}
		res, out, _ := Exec(t, p, h, bothy.ExecSpec{Argv: []string{"echo", "alive"}})
		if res.ExitCode != 0 || out != "alive\n" || res.DiskLimited {
			t.Fatalf("after the limit: result %+v stdout %q", res, out)
		}
	})
	t.Run("EFBIG", func(t *testing.T) {
		// A program that ignores SIGXFSZ gets EFBIG from the write.
		res, out, _ := Exec(t, p, h, bothy.ExecSpec{Script: "trap '' XFSZ; head -c 20971520 /dev/zero > big2 2>/dev/null; echo $?"})
		if res.ExitCode != 0 || out != "1\n" {
			t.Fatalf("result %+v stdout %q, want head to fail", res, out)
		}
		if fi, err := os.Stat(filepath.Join(ws, "big2")); err != nil || fi.Size() > limit {
			t.Fatalf("the file written past the limit: %v", err)
		}
	})
}

// testOpenFiles checks Limits.OpenFiles as every command's RLIMIT_NOFILE,
// soft and hard, which an unprivileged command cannot raise.
func testOpenFiles(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	p := newProvider(t)
	h, _ := Start(t, p, bothy.LeaseSpec{Limits: bothy.Limits{OpenFiles: 256}})
	res, out, errOut := Exec(t, p, h, bothy.ExecSpec{Script: "ulimit -Sn; ulimit -Hn; (ulimit -n 512) 2>/dev/null && echo raised; exit 0"})
	if res.ExitCode != 0 || out != "256\n256\n" {
		t.Fatalf("ulimit under a limit of 256 open files: %q %q (exit %d), want 256 twice and no raise", out, errOut, res.ExitCode)
	}
}

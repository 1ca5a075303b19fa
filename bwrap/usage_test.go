package bwrap_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/bwrap"
	"github.com/bothyhq/bothy/cgroupfs"
	"github.com/bothyhq/bothy/providertest"
	"github.com/bothyhq/bothy/testenv"
)

// leaseCgroup returns the lease's directory under a cgroup hierarchy.
func leaseCgroup(h *bothy.SandboxHandle, hierarchy string) string {
	return filepath.Join("/sys/fs/cgroup", hierarchy, bwrap.DefaultCgroupParent, h.LeaseID)
}

// commandCgroups returns the command cgroups left under the lease's
// directory of a hierarchy.
func commandCgroups(t *testing.T, h *bothy.SandboxHandle, hierarchy string) []string {
	t.Helper()
	entries, err := os.ReadDir(leaseCgroup(h, hierarchy))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "x") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestProvider_Usage(t *testing.T) {
	p := newProvider(t)
	h, _ := providertest.Start(t, p, bothy.LeaseSpec{})

	// providertest's LeaseMeter case compares CPUMicros with the lease's
	// cgroup accounting.
	t.Run("PeakMemory", func(t *testing.T) {
		// tail keeps the last line, which is all 100 MiB.
		res, _, errOut := providertest.Exec(t, p, h, bothy.ExecSpec{Script: "head -c 100M /dev/zero | tail | wc -c"})
		if res.ExitCode != 0 || res.Usage.PeakMemoryBytes < 90<<20 {
			t.Fatalf("result %+v stderr %q, want a peak of at least 90 MiB", res, errOut)
		}
	})
	t.Run("CommandCgroupsRemoved", func(t *testing.T) {
		for _, hier := range []string{"memory", "cpuacct", "unified"} {
			if left := commandCgroups(t, h, hier); len(left) > 0 {
				t.Errorf("command cgroups %v left under %s after their commands ended", left, hier)
			}
		}
	})
	t.Run("BackgroundKeepsCgroups", func(t *testing.T) {
		// A command's cgroups that hold its background stay, with it in
		// them, until Stop removes them.
		m := providertest.Marker()
		res, _, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Script: fmt.Sprintf("sleep %s >/dev/null 2>&1 &", m)})
		if res.ExitCode != 0 {
			t.Fatalf("result %+v", res)
		}
		pids := providertest.Processes(m)
		if len(pids) != 1 {
			t.Fatalf("background processes %v", pids)
		}
		for _, hier := range []string{"memory", "cpuacct", "unified"} {
			left := commandCgroups(t, h, hier)
			if len(left) != 1 {
				t.Fatalf("command cgroups under %s: %v, want the background's", hier, left)
			}
			in, _ := cgroupfs.ReadPids(filepath.Join(leaseCgroup(h, hier), left[0], "cgroup.procs"))
			if len(in) != 1 || in[0] != pids[0] {
				t.Fatalf("processes of the command cgroup under %s: %v, want %v", hier, in, pids)
			}
		}
		if res, err := p.Stop(t.Context(), h); err != nil || !res.Empty() {
			t.Fatalf("Stop: residue %+v, error %v", res, err)
		}
		providertest.WantNoProcess(t, m)
		for _, hier := range []string{"memory", "pids", "cpu", "cpuacct", "unified"} {
			if _, err := os.Stat(leaseCgroup(h, hier)); !os.IsNotExist(err) {
				t.Errorf("cgroup %s of the lease is left: %v", hier, err)
			}
		}
	})
}

func TestProvider_Scratch(t *testing.T) {
	p := newProvider(t)
	const limit = 10 << 20
	h, _ := providertest.Start(t, p, bothy.LeaseSpec{Limits: bothy.Limits{ScratchBytes: limit}})

	t.Run("HardLimit", func(t *testing.T) {
		res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Script: "ulimit -f unlimited 2>/dev/null && echo raised; ulimit -H -f"})
		if res.ExitCode != 0 || out != strconv.Itoa(limit/1024)+"\n" {
			t.Fatalf("result %+v stdout %q, want the hard limit of %d KiB kept", res, out, limit/1024)
		}
	})
	t.Run("Holder", func(t *testing.T) {
		var st struct{ Holder int }
		if err := json.Unmarshal(h.State, &st); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", st.Holder))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("Max file size %d %d bytes", limit, limit)
		for l := range strings.Lines(string(b)) {
			if strings.HasPrefix(l, "Max file size") && strings.Join(strings.Fields(l), " ") != want {
				t.Fatalf("the sandbox's init has %q, want %q", l, want)
			}
		}
	})
}

func TestProvider_Landlock(t *testing.T) {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 || abi < 2 {
		testenv.Skip(t, "Landlock ABI 2 or later (the host has %d, %v)", abi, errno)
	}
	p := newProvider(t)
	h, _ := providertest.Start(t, p, bothy.LeaseSpec{})
	var st struct{ UID, Landlock int }
	if err := json.Unmarshal(h.State, &st); err != nil || st.Landlock != int(abi) {
		t.Fatalf("handle state %s: Landlock ABI %d, want %d", h.State, st.Landlock, abi)
	}

	t.Run("Writable", func(t *testing.T) {
		script := `set -e
mkdir -p a b; echo x > a/f; mv a/f b/f; ln -s b/f l; rm l b/f; rmdir a b
echo x > /tmp/f; mkfifo /tmp/p; rm /tmp/f /tmp/p
echo x > /dev/shm/f; rm /dev/shm/f
echo x > /dev/null; : > /dev/null
echo 0 > /proc/self/oom_score_adj
echo ok`
		res, out, errOut := providertest.Exec(t, p, h, bothy.ExecSpec{Script: script})
		if res.ExitCode != 0 || out != "ok\n" {
			t.Fatalf("writing where commands may: result %+v stdout %q stderr %q", res, out, errOut)
		}
	})
	t.Run("ErrAccess", func(t *testing.T) {
		// The sandbox's / and /dev are directories that the lease's uid
		// owns (bwrap's tmpfs): only Landlock keeps commands out.
		for _, script := range []string{"touch /x", "mkdir /d", "ln -s /tmp /l", "touch /dev/x", "mkfifo /dev/p"} {
			res, _, errOut := providertest.Exec(t, p, h, bothy.ExecSpec{Script: script})
			if res.ExitCode == 0 || !strings.Contains(errOut, "Permission denied") {
				t.Errorf("%s: result %+v stderr %q, want EACCES", script, res, errOut)
			}
		}
		res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Script: "stat -c %u / /dev"})
		uid := strconv.Itoa(st.UID)
		if res.ExitCode != 0 || out != uid+"\n"+uid+"\n" {
			t.Fatalf("owners of / and /dev: %q, want the lease's uid %s (else this test proves nothing)", out, uid)
		}
	})
	t.Run("OtherCommandsEnviron", func(t *testing.T) {
		// A secret given to one command stays in the environment of what
		// it left running; a later command of the same lease (the same
		// uid) cannot read it (each command is its own Landlock domain,
		// which refuses ptrace-mode access to another; the test checks
		// the outcome, not which of the kernel's checks refuses).
		res, _, errOut := providertest.Exec(t, p, h, bothy.ExecSpec{Script: "sleep 30 & echo $! > /tmp/bg.pid",
			Env: map[string]string{"EARLIER_SECRET": "hunter2-value"}})
		if res.ExitCode != 0 {
			t.Fatalf("background: %+v %q", res, errOut)
		}
		res, out, errOut := providertest.Exec(t, p, h, bothy.ExecSpec{Script: `pid=$(cat /tmp/bg.pid)
test -r /proc/$pid/cmdline && tr '\0' ' ' < /proc/$pid/cmdline && echo
tr '\0' '\n' < /proc/$pid/environ | grep -c EARLIER_SECRET; true`})
		if !strings.Contains(out, "sleep 30") || strings.Contains(out, "1\n") || !strings.Contains(errOut, "Permission denied") {
			t.Fatalf("reading another command's environment: %+v stdout %q stderr %q; want its cmdline readable and its environ denied", res, out, errOut)
		}
		// Its own environment, it reads.
		res, out, _ = providertest.Exec(t, p, h, bothy.ExecSpec{Script: `cat /proc/$$/environ | tr '\0' '\n' | grep -c OWN_VALUE`,
			Env: map[string]string{"OWN_VALUE": "x"}})
		if res.ExitCode != 0 || out != "1\n" {
			t.Fatalf("own environ: %+v %q", res, out)
		}
	})
}

package gvisor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/gvisor"
	"github.com/bothyhq/bothy/providertest"
	"github.com/bothyhq/bothy/testenv"
)

// newProvider returns a provider with the default options, or ends the test
// when the host lacks what it needs.
func newProvider(t testing.TB) *gvisor.Provider {
	t.Helper()
	p, err := gvisor.New(gvisor.Options{KillGrace: time.Second})
	if err != nil {
		testenv.Skip(t, "%v; run scripts/sandbox-deps as root", err)
	}
	return p
}

func TestProvider(t *testing.T) {
	providertest.TestProvider(t, func(t *testing.T) bothy.Provider { return newProvider(t) })
}

func TestProvider_Isolation(t *testing.T) {
	p := newProvider(t)
	h, ws := providertest.Start(t, p, bothy.LeaseSpec{})

	t.Run("LeaseUID", func(t *testing.T) {
		res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Script: "id -u; id -g; echo x > owned"})
		f := strings.Fields(out)
		if res.ExitCode != 0 || len(f) != 2 || f[0] != f[1] {
			t.Fatalf("id: %q (result %+v)", out, res)
		}
		uid, _ := strconv.Atoi(f[0])
		if uid < gvisor.DefaultUIDBase {
			t.Fatalf("uid %d, want one of the lease range", uid)
		}
		fi, err := os.Stat(filepath.Join(ws, "owned"))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != uid {
			t.Fatalf("a file the command wrote is %d:%d on the host, want %d:%d", st.Uid, st.Gid, uid, uid)
		}
	})
	t.Run("ErrShadow", func(t *testing.T) {
		res, _, errOut := providertest.Exec(t, p, h, bothy.ExecSpec{Argv: []string{"cat", "/etc/shadow"}})
		if res.ExitCode == 0 || !strings.Contains(errOut, "Permission denied") {
			t.Fatalf("reading /etc/shadow: result %+v stderr %q", res, errOut)
		}
	})
	t.Run("NoCapabilities", func(t *testing.T) {
		res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Script: "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status"})
		if res.ExitCode != 0 {
			t.Fatalf("result %+v", res)
		}
		for l := range strings.Lines(out) {
			f := strings.Fields(l)
			if len(f) == 2 && (f[0] == "NoNewPrivs:" && f[1] == "1" || f[1] == "0000000000000000") {
				continue
			}
			t.Errorf("capability set not empty or no_new_privs unset: %q", l)
		}
	})
	t.Run("OnlyWorkspaceAndSystem", func(t *testing.T) {
		// The root is a skeleton: no /home, /root, /run or /var of the host,
		// and /usr and /etc are read-only.
		res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Script: `for d in /home /root /run /var /opt /srv; do [ -e $d ] && echo $d; done; touch /usr/x /etc/x /x 2>/dev/null && echo wrote; echo done`})
		if res.ExitCode != 0 || out != "done\n" {
			t.Fatalf("stdout %q (result %+v)", out, res)
		}
	})
	providertest.TestNetworkIsolation(t, p, h)
	t.Run("GuestKernel", func(t *testing.T) {
		// The command sees gVisor's kernel, not the host's.
		host, err := os.ReadFile("/proc/version")
		if err != nil {
			t.Fatal(err)
		}
		res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Argv: []string{"cat", "/proc/version"}})
		if res.ExitCode != 0 || out == "" || out == string(host) {
			t.Fatalf("/proc/version %q (result %+v), the host's is %q", out, res, host)
		}
	})
	t.Run("NoArgvSecrets", func(t *testing.T) {
		m := providertest.Marker()
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Exec(context.Background(), h, bothy.ExecSpec{Argv: []string{"sleep", m}, Env: map[string]string{"TOKEN": "tok-" + m}, Timeout: 10 * time.Second})
		}()
		deadline := time.Now().Add(5 * time.Second)
		for !running(t, p, h, m) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if pids := providertest.Processes("tok-" + m); len(pids) > 0 {
			t.Errorf("an environment value is in the command line of %v", pids)
		}
		p.Stop(context.Background(), h) // ends the sleeper; Start's cleanup stops again
		<-done
	})
}

// running reports whether a process of h's sandbox has marker in its
// command line.
func running(t *testing.T, p *gvisor.Provider, h *bothy.SandboxHandle, marker string) bool {
	t.Helper()
	cmds, err := p.SandboxProcesses(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		if strings.Contains(c, marker) {
			return true
		}
	}
	return false
}

// TestProvider_TimeoutKillsEscapees checks that the tag reaches what left
// the command's session and process group.
func TestProvider_TimeoutKillsEscapees(t *testing.T) {
	p := newProvider(t)
	h, _ := providertest.Start(t, p, bothy.LeaseSpec{})
	m, other := providertest.Marker(), providertest.Marker()
	res, _, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Script: fmt.Sprintf("sleep %s >/dev/null 2>&1 &", other)})
	if res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	res, _, _ = providertest.Exec(t, p, h, bothy.ExecSpec{
		Script:  fmt.Sprintf("setsid sleep %s >/dev/null 2>&1 & (setsid sh -c 'sleep %s & sleep %s' >/dev/null 2>&1 &); sleep %s", m, m, m, m),
		Timeout: time.Second,
	})
	if !res.TimedOut {
		t.Fatalf("result %+v, want TimedOut", res)
	}
	deadline := time.Now().Add(2 * time.Second)
	for running(t, p, h, m) {
		if time.Now().After(deadline) {
			t.Fatal("a process that left the command's session survived its timeout")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !running(t, p, h, other) {
		t.Fatal("the timeout of one command killed the background of another")
	}
}

func TestProvider_Limits(t *testing.T) {
	p := newProvider(t)
	h, _ := providertest.Start(t, p, bothy.LeaseSpec{Limits: bothy.Limits{MemoryBytes: 256 << 20, Pids: 64, CPUMillis: 250}})
	var st struct{ Cgroup string }
	if err := json.Unmarshal(h.State, &st); err != nil || st.Cgroup == "" {
		t.Fatalf("state %s: %v", h.State, err)
	}
	for file, want := range map[string]string{
		"memory/memory.limit_in_bytes": "268435456",
		"pids/pids.max":                strconv.Itoa(64 + gvisor.MinPids),
		"cpu/cpu.cfs_quota_us":         "25000",
	} {
		ctl, name, _ := strings.Cut(file, "/")
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctl, st.Cgroup, name))
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s: %q, %v; want %s", file, b, err, want)
		}
	}
	t.Run("ForkBomb", func(t *testing.T) {
		// The pids limit holds inside the sandbox: the bomb's forks fail
		// and the sandbox goes on.
		res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Script: `ulimit -u; bomb() { bomb | bomb & }; bomb; sleep 10`, Timeout: 3 * time.Second})
		if out != "64\n" {
			t.Fatalf("ulimit -u %q (result %+v), want 64", out, res)
		}
		if out, err := exec.Command("echo", "host").Output(); err != nil || string(out) != "host\n" {
			t.Fatalf("host command after the fork bomb: %q, %v", out, err)
		}
		res, out, _ = providertest.Exec(t, p, h, bothy.ExecSpec{Argv: []string{"echo", "alive"}})
		if res.ExitCode != 0 || out != "alive\n" {
			t.Fatalf("after the fork bomb: result %+v stdout %q", res, out)
		}
	})
}

func TestProvider_Stop(t *testing.T) {
	p := newProvider(t)
	spec := bothy.LeaseSpec{LeaseID: providertest.NewID("lease"), ComputerID: "c1", Generation: 1, Workspace: t.TempDir()}
	h, err := p.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := h.Encode()
	var st struct{ ID, Cgroup string }
	json.Unmarshal(h.State, &st)
	if _, err := p.Start(context.Background(), spec); bothy.ErrorCode(err) != bothy.ECONFLICT {
		t.Fatalf("second Start of one lease: %v, want %s", err, bothy.ECONFLICT)
	}
	if res, err := p.Stop(context.Background(), h); err != nil || !res.Empty() {
		t.Fatalf("Stop: %+v, %v", res, err)
	}
	left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", st.Cgroup))
	for _, path := range append(left, filepath.Join(gvisor.DefaultNetnsDir, st.ID), filepath.Join(gvisor.DefaultStateDir, "leases", spec.LeaseID)) {
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("%s is left: %v", path, err)
		}
	}
	if pids := providertest.Processes(st.ID); len(pids) > 0 {
		t.Errorf("host processes %v of the sandbox are left", pids)
	}
	if _, err := os.Stat(spec.Workspace); err != nil {
		t.Errorf("the workspace went with the sandbox: %v", err)
	}
	if _, err := p.Recover(context.Background(), b); bothy.ErrorCode(err) != bothy.ENOTFOUND {
		t.Fatalf("Recover after Stop: %v, want %s", err, bothy.ENOTFOUND)
	}
}

func TestProvider_RecoverEnded(t *testing.T) {
	p := newProvider(t)
	h, _ := providertest.Start(t, p, bothy.LeaseSpec{})
	var st struct{ ID string }
	json.Unmarshal(h.State, &st)
	// Only the host can end the sandbox: kill its sentry.
	for _, pid := range providertest.Processes("runsc-sandbox") {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(b), st.ID) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	providertest.WantGone(t, p, h)

}

func TestProvider_InitUnkillable(t *testing.T) {
	providertest.TestInitUnkillable(t, newProvider(t))
}

func TestProvider_ProgramNotFound(t *testing.T) {
	p := newProvider(t)
	h, _ := providertest.Start(t, p, bothy.LeaseSpec{})
	for _, spec := range []bothy.ExecSpec{{Argv: []string{"bothy-no-such-program"}}, {Argv: []string{"true"}, Cwd: "missing"}} {
		res, _, errOut := providertest.Exec(t, p, h, spec)
		if res.ExitCode != 127 || errOut == "" {
			t.Errorf("%+v: result %+v stderr %q, want exit 127 and a reason", spec, res, errOut)
		}
	}
}

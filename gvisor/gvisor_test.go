package gvisor_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/gvisor"
	"github.com/bothyhq/bothy/providertest"
	"github.com/bothyhq/bothy/sandbox"
)

// newProvider returns a provider with the default options, or ends the test
// when the host lacks what it needs.
func newProvider(t testing.TB) *gvisor.Provider {
	p, err := gvisor.New(gvisor.Options{Host: sandbox.Host{KillGrace: time.Second}})
	return providertest.Available(t, p, err)
}

func TestProvider(t *testing.T) {
	providertest.TestProvider(t, func(t *testing.T) bothy.Provider { return newProvider(t) })
}

func TestProvider_Isolation(t *testing.T) {
	providertest.TestIsolating(t, providertest.Isolating{
		New:          func(t *testing.T) bothy.Provider { return newProvider(t) },
		UIDBase:      gvisor.DefaultUIDBase,
		Unprivileged: []string{"CapInh", "CapPrm", "CapEff", "CapBnd"},
		Cases: map[string]func(*testing.T, bothy.Provider, *bothy.SandboxHandle, string){
			"OnlyWorkspaceAndSystem": func(t *testing.T, p bothy.Provider, h *bothy.SandboxHandle, _ string) {
				// The root is a skeleton: no /home, /root, /run or /var of
				// the host, and /usr and /etc are read-only.
				res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Script: `for d in /home /root /run /var /opt /srv; do [ -e $d ] && echo $d; done; touch /usr/x /etc/x /x 2>/dev/null && echo wrote; echo done`})
				if res.ExitCode != 0 || out != "done\n" {
					t.Fatalf("stdout %q (result %+v)", out, res)
				}
			},
			"GuestKernel": func(t *testing.T, p bothy.Provider, h *bothy.SandboxHandle, _ string) {
				// The command sees gVisor's kernel, not the host's.
				host, err := os.ReadFile("/proc/version")
				if err != nil {
					t.Fatal(err)
				}
				res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Argv: []string{"cat", "/proc/version"}})
				if res.ExitCode != 0 || out == "" || out == string(host) {
					t.Fatalf("/proc/version %q (result %+v), the host's is %q", out, res, host)
				}
			},
		},
		Traces: func(t *testing.T, h *bothy.SandboxHandle) ([]string, string) {
			var st struct{ ID, Cgroup string }
			json.Unmarshal(h.State, &st)
			paths, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", st.Cgroup))
			return append(paths, filepath.Join(gvisor.DefaultNetnsDir, st.ID), filepath.Join(gvisor.DefaultStateDir, "leases", h.LeaseID)), st.ID
		},
		// Only the host can end the sandbox: kill its sentry.
		End: func(t *testing.T, h *bothy.SandboxHandle) {
			var st struct{ ID string }
			json.Unmarshal(h.State, &st)
			for _, pid := range providertest.Processes("runsc-sandbox") {
				if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(b), st.ID) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		},
	})
}

// running reports whether a process of h's sandbox has marker in its
// command line.
func running(t *testing.T, p *gvisor.Provider, h *bothy.SandboxHandle, marker string) bool {
	return len(providertest.ProcessesOf(t, p, h, marker)) > 0
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
		providertest.WantAlive(t, p, h, "the fork bomb")
	})
}

func TestProvider_ProgramNotFound(t *testing.T) {
	p := newProvider(t)
	h, _ := providertest.Start(t, p, bothy.LeaseSpec{})
	// A missing working directory is an error of Exec
	// (providertest's Workspace/MissingCwd), not an exit status.
	for _, spec := range []bothy.ExecSpec{{Argv: []string{"bothy-no-such-program"}}} {
		res, _, errOut := providertest.Exec(t, p, h, spec)
		if res.ExitCode != 127 || errOut == "" {
			t.Errorf("%+v: result %+v stderr %q, want exit 127 and a reason", spec, res, errOut)
		}
	}
}

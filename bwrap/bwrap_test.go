package bwrap_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/bwrap"
	"github.com/bothyhq/bothy/providertest"
	"github.com/bothyhq/bothy/testenv"
)

// newProvider returns a provider with the default options, or ends the test
// when the host lacks what it needs.
func newProviderB() (*bwrap.Provider, error) { return bwrap.New(bwrap.Options{}) }

func newProvider(t *testing.T) *bwrap.Provider {
	t.Helper()
	p, err := bwrap.New(bwrap.Options{KillGrace: time.Second})
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

	t.Run("UnprivilegedUID", func(t *testing.T) {
		res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Script: "id -u; id -g; id -G"})
		if res.ExitCode != 0 {
			t.Fatalf("result %+v", res)
		}
		f := strings.Fields(out)
		uid, _ := strconv.Atoi(f[0])
		if len(f) != 3 || uid < bwrap.DefaultUIDBase || f[1] != f[0] || f[2] != f[0] {
			t.Fatalf("id -u, -g, -G: %q, want one unprivileged uid and no other group", out)
		}
		fi, err := os.Stat(ws)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(interface{}); st == nil {
			t.Fatal("no stat")
		}
	})
	t.Run("ErrShadow", func(t *testing.T) {
		res, _, errOut := providertest.Exec(t, p, h, bothy.ExecSpec{Argv: []string{"cat", "/etc/shadow"}})
		if res.ExitCode == 0 || !strings.Contains(errOut, "Permission denied") {
			t.Fatalf("reading /etc/shadow: result %+v stderr %q", res, errOut)
		}
	})
	t.Run("NoCapabilities", func(t *testing.T) {
		// The bounding set is full: entering the sandbox's user namespace
		// fills it, and once the command runs nothing can empty it. It is
		// bound to that namespace, and no_new_privs keeps file
		// capabilities and set-uid programs from drawing on it.
		res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Script: "grep -E '^(Cap(Inh|Prm|Eff|Amb)|NoNewPrivs):' /proc/self/status"})
		if res.ExitCode != 0 {
			t.Fatalf("result %+v", res)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 5 {
			t.Fatalf("status lines %q", out)
		}
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) == 2 && f[0] == "NoNewPrivs:" && f[1] == "1" {
				continue
			}
			if len(f) != 2 || f[1] != "0000000000000000" {
				t.Errorf("capability set not empty or no_new_privs unset: %q", l)
			}
		}
	})
	t.Run("ReadOnlySystem", func(t *testing.T) {
		res, _, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Script: "touch /usr/x || touch /etc/x || exit 0; exit 1"})
		if res.ExitCode != 0 {
			t.Fatal("a command wrote to /usr or /etc")
		}
	})
	providertest.TestNetworkIsolation(t, p, h)
	t.Run("NoArgvSecrets", func(t *testing.T) {
		// Environment values travel through a pipe, never a command line
		// that every host user can read.
		m := providertest.Marker()
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Exec(context.Background(), h, bothy.ExecSpec{Argv: []string{"sleep", m}, Env: map[string]string{"TOKEN": "tok-" + m}, Timeout: 10 * time.Second})
		}()
		deadline := time.Now().Add(5 * time.Second)
		for len(providertest.Processes(m)) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if pids := providertest.Processes("tok-" + m); len(pids) > 0 {
			t.Errorf("an environment value is in the command line of %v", pids)
		}
		p.Stop(context.Background(), h) // ends the sleeper; Start's cleanup stops again
		<-done
	})
}

func TestProvider_Limits(t *testing.T) {
	p := newProvider(t)

	t.Run("OOMKilled", func(t *testing.T) {
		h, _ := providertest.Start(t, p, bothy.LeaseSpec{Limits: bothy.Limits{MemoryBytes: 64 << 20}})
		res, _, _ := providertest.Exec(t, p, h, bothy.ExecSpec{
			Argv:    []string{"perl", "-e", `$x = "a" x (256 * 1024 * 1024); print length($x), "\n"`},
			Timeout: 20 * time.Second,
		})
		if !res.OOMKilled || res.ExitCode != 137 {
			t.Fatalf("result %+v, want OOMKilled and exit 137", res)
		}
		// The lease still works after an OOM kill.
		res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Argv: []string{"echo", "alive"}})
		if res.ExitCode != 0 || out != "alive\n" || res.OOMKilled {
			t.Fatalf("after OOM: result %+v stdout %q", res, out)
		}
	})
	t.Run("ForkBomb", func(t *testing.T) {
		h, _ := providertest.Start(t, p, bothy.LeaseSpec{Limits: bothy.Limits{Pids: 64}})
		start := time.Now()
		res, _, _ := providertest.Exec(t, p, h, bothy.ExecSpec{
			Script:  `bomb() { bomb | bomb & }; bomb; sleep 10`,
			Timeout: 3 * time.Second,
		})
		if !res.PidsLimited {
			t.Fatalf("result %+v, want PidsLimited", res)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Fatalf("the fork bomb ran %v", d)
		}
		// The host goes on: this process can still start processes.
		if out, err := exec.Command("echo", "host").Output(); err != nil || string(out) != "host\n" {
			t.Fatalf("host command after the fork bomb: %q, %v", out, err)
		}
		res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Argv: []string{"echo", "alive"}})
		if res.ExitCode != 0 || out != "alive\n" {
			t.Fatalf("after the fork bomb: result %+v stdout %q", res, out)
		}
	})
	t.Run("CPU", func(t *testing.T) {
		h, _ := providertest.Start(t, p, bothy.LeaseSpec{Limits: bothy.Limits{CPUMillis: 250}})
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", bwrap.DefaultCgroupParent, h.LeaseID, "cpu.cfs_quota_us"))
		if err != nil || strings.TrimSpace(string(b)) != "25000" {
			t.Fatalf("cpu.cfs_quota_us %q, %v; want 25000", b, err)
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
	if _, err := p.Start(context.Background(), spec); bothy.ErrorCode(err) != bothy.ECONFLICT {
		t.Fatalf("second Start of one lease: %v, want %s", err, bothy.ECONFLICT)
	}
	if res, err := p.Stop(context.Background(), h); err != nil || !res.Empty() {
		t.Fatalf("Stop: %+v, %v", res, err)
	}
	for _, ctl := range []string{"memory", "pids", "cpu", "unified"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctl, bwrap.DefaultCgroupParent, spec.LeaseID)); !os.IsNotExist(err) {
			t.Errorf("cgroup %s of the lease is left: %v", ctl, err)
		}
	}
	if _, err := os.Stat(filepath.Join(bwrap.DefaultStateDir, "leases", spec.LeaseID)); !os.IsNotExist(err) {
		t.Errorf("lease directory is left: %v", err)
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
	var st struct{ Holder int }
	if err := json.Unmarshal(h.State, &st); err != nil || st.Holder <= 0 {
		t.Fatalf("state %s: %v", h.State, err)
	}
	// Only the host can end the sandbox's init.
	if err := syscall.Kill(st.Holder, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	providertest.WantGone(t, p, h)

}

func TestProvider_InitUnkillable(t *testing.T) {
	providertest.TestInitUnkillable(t, newProvider(t))
}

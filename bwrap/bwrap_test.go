package bwrap_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/bwrap"
	"github.com/bothyhq/bothy/providertest"
	"github.com/bothyhq/bothy/sandbox"
)

// newProvider returns a provider with the default options, or ends the test
// when the host lacks what it needs.
func newProvider(t testing.TB) *bwrap.Provider {
	p, err := bwrap.New(bwrap.Options{Host: sandbox.Host{KillGrace: time.Second}})
	return providertest.Available(t, p, err)
}

func TestProvider(t *testing.T) {
	providertest.TestProvider(t, func(t *testing.T) bothy.Provider { return newProvider(t) })
}

func TestProvider_Isolation(t *testing.T) {
	providertest.TestIsolating(t, providertest.Isolating{
		New:          func(t *testing.T) bothy.Provider { return newProvider(t) },
		UIDBase:      bwrap.DefaultUIDBase,
		Unprivileged: []string{"CapInh", "CapPrm", "CapEff", "CapAmb", "NoNewPrivs"},
		Cases: map[string]func(*testing.T, bothy.Provider, *bothy.SandboxHandle, string){
			"NoGroups": func(t *testing.T, p bothy.Provider, h *bothy.SandboxHandle, _ string) {
				res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Script: "id -u; id -G"})
				if f := strings.Fields(out); res.ExitCode != 0 || len(f) != 2 || f[1] != f[0] {
					t.Fatalf("id -u, -G: %q (result %+v), want no group but the lease's", out, res)
				}
			},
		},
		Traces: func(t *testing.T, h *bothy.SandboxHandle) ([]string, string) {
			var paths []string
			for _, ctl := range []string{"memory", "pids", "cpu", "unified"} {
				paths = append(paths, filepath.Join("/sys/fs/cgroup", ctl, bwrap.DefaultCgroupParent, h.LeaseID))
			}
			return append(paths, filepath.Join(bwrap.DefaultStateDir, "leases", h.LeaseID)), ""
		},
		// Only the host can end the sandbox's init.
		End: func(t *testing.T, h *bothy.SandboxHandle) {
			var st struct{ Holder int }
			if err := json.Unmarshal(h.State, &st); err != nil || st.Holder <= 0 {
				t.Fatalf("state %s: %v", h.State, err)
			}
			if err := syscall.Kill(st.Holder, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		},
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
		providertest.WantAlive(t, p, h, "OOM")
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
		providertest.WantAlive(t, p, h, "the fork bomb")
	})
	t.Run("CPU", func(t *testing.T) {
		h, _ := providertest.Start(t, p, bothy.LeaseSpec{Limits: bothy.Limits{CPUMillis: 250}})
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", bwrap.DefaultCgroupParent, h.LeaseID, "cpu.cfs_quota_us"))
		if err != nil || strings.TrimSpace(string(b)) != "25000" {
			t.Fatalf("cpu.cfs_quota_us %q, %v; want 25000", b, err)
		}
	})
}

// TestExec_OnlyItsDescriptors: a descriptor open in the caller without
// close-on-exec (78 here, as one the agent inherited would be) does not
// reach the command, which has standard input, output and error and its
// secret files only: the enter program closes the rest.
func TestExec_OnlyItsDescriptors(t *testing.T) {
	p := newProvider(t)
	h, _ := providertest.Start(t, p, bothy.LeaseSpec{})
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Dup3(int(f.Fd()), 78, 0); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(78)
	res, out, errOut := providertest.Exec(t, p, h, bothy.ExecSpec{
		Script:      `echo "$(for f in /proc/self/fd/*; do [ -L "$f" ] && printf '%s ' "${f##*/}"; done)"; echo "$A_FILE $B_FILE"`,
		SecretFiles: map[string]string{"A_FILE": "a", "B_FILE": "b"},
	})
	// The glob's own descriptor is closed by the time of the test.
	if want := "0 1 12 13 2 \n/dev/fd/12 /dev/fd/13\n"; res.ExitCode != 0 || out != want {
		t.Fatalf("the command's descriptors and files: %q (stderr %q, result %+v), want %q", out, errOut, res, want)
	}
}

// TestProvider_StartAgainAfterCutShort: a caller that died after Start but
// before it recorded the handle asks to start the lease again (chaos
// suite: serve killed during a cold start). The second Start undoes what
// the first left and starts afresh, rather than failing with "already
// started"; the first sandbox is gone and nothing is left at Stop. (A
// second Start of a lease the same Provider started is still ECONFLICT:
// providertest's Isolating suite.)
func TestProvider_StartAgainAfterCutShort(t *testing.T) {
	// died is the provider of the process that died; p, of the next one.
	died, p := newProvider(t), newProvider(t)
	spec := bothy.LeaseSpec{LeaseID: providertest.NewID("lease"), ComputerID: providertest.NewID("computer"), Generation: 1, Workspace: t.TempDir()}
	first, err := died.Start(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Start(t.Context(), spec)
	if err != nil {
		p.Stop(t.Context(), first)
		t.Fatalf("Start of a lease a start cut short left: %v", err)
	}
	defer func() {
		if res, err := p.Stop(t.Context(), second); err != nil || !res.Empty() {
			t.Errorf("Stop: residue %+v, error %v", res, err)
		}
	}()
	raw, _ := first.Encode()
	if _, err := p.Recover(t.Context(), raw); bothy.ErrorCode(err) != bothy.ENOTFOUND {
		t.Errorf("the first sandbox after the second Start: %v, want not_found", err)
	}
	providertest.WantAlive(t, p, second, "after a start cut short")
}

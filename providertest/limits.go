package providertest

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/testenv"
)

// testCommandLimits checks a command's own limits (ExecSpec.Limits): a
// CommandLimiter bounds its file size, memory, pids and CPU apart from the
// lease's, and the next command without limits is not bound by them.
// Another provider refuses them.
func testCommandLimits(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	p := newProvider(t)
	h, _ := Start(t, p, bothy.LeaseSpec{Limits: bothy.Limits{MemoryBytes: 512 << 20}})
	cl, ok := p.(bothy.CommandLimiter)
	if !ok || !cl.LimitsCommands() {
		t.Run("ErrInvalid", func(t *testing.T) {
			for _, l := range []bothy.Limits{{MemoryBytes: 64 << 20}, {Pids: 10}, {CPUMillis: 100}, {ScratchBytes: 1 << 20}} {
				if _, err := p.Exec(t.Context(), h, bothy.ExecSpec{Argv: []string{"true"}, Limits: l}); bothy.ErrorCode(err) != bothy.EINVALID {
					t.Errorf("limits %+v: %v, want EINVALID", l, err)
				}
			}
		})
		return
	}

	t.Run("Scratch", func(t *testing.T) {
		res, _, errOut := Exec(t, p, h, bothy.ExecSpec{Argv: []string{"dd", "if=/dev/zero", "of=cmd-big", "bs=1M", "count=4", "status=none"},
			Limits: bothy.Limits{ScratchBytes: 1 << 20}})
		if !res.DiskLimited {
			t.Fatalf("a 4 MiB file under a command's 1 MiB limit: %+v, stderr %q", res, errOut)
		}
		res, _, _ = Exec(t, p, h, bothy.ExecSpec{Argv: []string{"dd", "if=/dev/zero", "of=cmd-big", "bs=1M", "count=4", "status=none"}})
		wantExit(t, res, 0)
	})
	t.Run("Memory", func(t *testing.T) {
		res, _, _ := Exec(t, p, h, bothy.ExecSpec{Script: AllocScript, Limits: bothy.Limits{MemoryBytes: 48 << 20}})
		if res.ExitCode == 77 {
			testenv.Skip(t, "no perl")
		}
		if res.ExitCode == 0 || !res.OOMKilled {
			t.Fatalf("100 MiB under a command's 48 MiB limit: %+v", res)
		}
		res, _, _ = Exec(t, p, h, bothy.ExecSpec{Script: AllocScript})
		wantExit(t, res, 0)
	})
	t.Run("Pids", func(t *testing.T) {
		res, _, errOut := Exec(t, p, h, bothy.ExecSpec{Script: `for i in $(seq 40); do sleep 1 & done 2>/dev/null; wait`,
			Limits: bothy.Limits{Pids: 16}, Timeout: 20 * time.Second})
		if !res.PidsLimited {
			t.Fatalf("40 processes under a command's limit of 16: %+v, stderr %q", res, errOut)
		}
		res, _, _ = Exec(t, p, h, bothy.ExecSpec{Script: `for i in $(seq 40); do sleep 0.2 & done; wait`})
		wantExit(t, res, 0)
		if res.PidsLimited {
			t.Errorf("the next command without limits was pids-limited")
		}
	})
	t.Run("CPU", func(t *testing.T) {
		res, _, _ := Exec(t, p, h, bothy.ExecSpec{Script: "timeout 2 sh -c 'while :; do :; done'; true", Limits: bothy.Limits{CPUMillis: 100}})
		wantExit(t, res, 0)
		// A tenth of a CPU for two seconds: a fifth of a second, where an
		// unlimited loop would take about two.
		if cpu := time.Duration(res.Usage.CPUMicros) * time.Microsecond; cpu > 600*time.Millisecond {
			t.Fatalf("a command limited to 0.1 CPU used %v of CPU in %v", cpu, res.Duration)
		}
	})
}

// testSecretFiles checks ExecSpec.SecretFiles: the command reads the value
// from the file its variable names, more than once, cannot change it, and
// nothing of it is in the workspace; a later command does not get it. A
// provider that is no SecretFiler refuses the spec (EINVALID).
func testSecretFiles(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	p := newProvider(t)
	h, ws := Start(t, p, bothy.LeaseSpec{})
	const value = "file-secret-value-8c1f"
	spec := bothy.ExecSpec{Script: `cat "$KEY_FILE"; echo; cat "$KEY_FILE"; echo; echo x >> "$KEY_FILE" 2>/dev/null && echo WROTE; case "$KEY_FILE" in /dev/fd/*) echo fd;; esac`,
		SecretFiles: map[string]string{"KEY_FILE": value}}
	if sf, ok := p.(bothy.SecretFiler); !ok || !sf.GivesSecretFiles() {
		if _, err := p.Exec(t.Context(), h, spec); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Fatalf("a provider that gives no secret files: %v, want EINVALID", err)
		}
		return
	}
	res, out, errOut := Exec(t, p, h, spec)
	wantExit(t, res, 0)
	if out != value+"\n"+value+"\nfd\n" {
		t.Fatalf("stdout %q (stderr %q), want the value twice and a /dev/fd path", out, errOut)
	}
	res, out, _ = Exec(t, p, h, bothy.ExecSpec{Script: `echo "[$KEY_FILE]"; ls /dev/fd/ | wc -l`})
	wantExit(t, res, 0)
	if !strings.HasPrefix(out, "[]\n") {
		t.Errorf("a later command sees %q", out)
	}
	if b, err := exec.Command("grep", "-rl", value, ws).Output(); err == nil || len(b) > 0 {
		t.Errorf("the workspace holds the value: %s", b)
	}
}

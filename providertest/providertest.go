// Package providertest is the conformance suite that every bothy.Provider
// passes. A provider's test calls TestProvider with a constructor:
//
//	func TestProvider(t *testing.T) {
//		providertest.TestProvider(t, func(t *testing.T) bothy.Provider { return process.New() })
//	}
//
// Besides running commands, it checks what every provider measures and
// enforces alike: a command's Usage (CPU time, peak and integrated
// memory, wall time), Limits.ScratchBytes as the largest file a command
// can write (DiskLimited when that kills it) and LeaseSpec.NetNS. The
// NetNS case needs root (it creates a namespace with ip) and is skipped
// otherwise. What every isolating provider does (a uid of its own, no
// capabilities, no network without NetNS, nothing left after Stop) is
// TestIsolating's; what only one does (Landlock, cgroup accounting) is for
// the provider's own tests, with the helpers here (NetNS, BusyScript,
// AllocScript, WantAlive).
package providertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/sandbox"
	"github.com/bothyhq/bothy/testenv"
)

// ProcessLister is a Provider whose sandboxes run processes that the host
// cannot name by their command lines: gVisor runs them on its own kernel,
// and on the host they are all stubs of its sentry. The suite then looks
// for a command's processes in the sandbox as well as on the host.
type ProcessLister interface {
	// SandboxProcesses returns the command lines, arguments joined by
	// spaces, of the live processes in h's sandbox; none once the sandbox
	// is stopped.
	SandboxProcesses(ctx context.Context, h *bothy.SandboxHandle) ([]string, error)
}

// TestProvider runs the conformance suite against providers made by
// newProvider, which may be called several times in one test (to recover a
// sandbox in a new provider, as a restarted agent does).
func TestProvider(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	t.Run("Exec", func(t *testing.T) { testExec(t, newProvider) })
	t.Run("Workspace", func(t *testing.T) { testWorkspace(t, newProvider) })
	t.Run("Kill", func(t *testing.T) { testKill(t, newProvider) })
	t.Run("Background", func(t *testing.T) { testBackground(t, newProvider) })
	t.Run("Stop", func(t *testing.T) { testStop(t, newProvider) })
	t.Run("Recover", func(t *testing.T) { testRecover(t, newProvider) })
	t.Run("Validate", func(t *testing.T) { testValidate(t, newProvider) })
	t.Run("Usage", func(t *testing.T) { testUsage(t, newProvider) })
	t.Run("LeaseMeter", func(t *testing.T) { testLeaseMeter(t, newProvider) })
	t.Run("Scratch", func(t *testing.T) { testScratch(t, newProvider) })
	t.Run("OpenFiles", func(t *testing.T) { testOpenFiles(t, newProvider) })
	t.Run("NetNS", func(t *testing.T) { testNetNS(t, newProvider) })
	t.Run("CommandLimits", func(t *testing.T) { testCommandLimits(t, newProvider) })
	t.Run("SecretFiles", func(t *testing.T) { testSecretFiles(t, newProvider) })
}

func testExec(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	p := newProvider(t)
	h, _ := Start(t, p, bothy.LeaseSpec{Env: map[string]string{"LEASE_VAR": "lease", "OVERRIDE": "lease"}})

	t.Run("Argv", func(t *testing.T) {
		res, out, errOut := Exec(t, p, h, bothy.ExecSpec{Argv: []string{"echo", "hello", "world"}})
		wantExit(t, res, 0)
		if out != "hello world\n" || errOut != "" {
			t.Fatalf("stdout %q stderr %q, want %q and nothing", out, errOut, "hello world\n")
		}
	})
	t.Run("StdoutStderr", func(t *testing.T) {
		res, out, errOut := Exec(t, p, h, bothy.ExecSpec{Script: "echo out; echo err >&2; echo out2"})
		wantExit(t, res, 0)
		if out != "out\nout2\n" || errOut != "err\n" {
			t.Fatalf("stdout %q stderr %q", out, errOut)
		}
	})
	t.Run("ExitCode", func(t *testing.T) {
		res, _, _ := Exec(t, p, h, bothy.ExecSpec{Script: "exit 3"})
		wantExit(t, res, 3)
		res, _, _ = Exec(t, p, h, bothy.ExecSpec{Argv: []string{"false"}})
		wantExit(t, res, 1)
		res, _, _ = Exec(t, p, h, bothy.ExecSpec{Script: "kill -9 $$"})
		wantExit(t, res, 137)
	})
	t.Run("ProgramNotFound", func(t *testing.T) {
		// Either an error or a non-zero exit (a sandbox's shell reports
		// 127); never success.
		res, err := p.Exec(context.Background(), h, bothy.ExecSpec{Argv: []string{"bothy-no-such-program"}, Timeout: 10 * time.Second})
		if err == nil && res.ExitCode == 0 {
			t.Fatal("a missing program succeeded")
		}
	})
	t.Run("Stdin", func(t *testing.T) {
		res, out, _ := Exec(t, p, h, bothy.ExecSpec{Argv: []string{"cat"}, Stdin: strings.NewReader("piped\ninput\n")})
		wantExit(t, res, 0)
		if out != "piped\ninput\n" {
			t.Fatalf("stdout %q", out)
		}
		res, out, _ = Exec(t, p, h, bothy.ExecSpec{Script: "wc -c"})
		wantExit(t, res, 0)
		if strings.TrimSpace(out) != "0" {
			t.Fatalf("nil stdin read %q bytes, want 0", out)
		}
	})
	t.Run("Env", func(t *testing.T) {
		res, out, _ := Exec(t, p, h, bothy.ExecSpec{
			Script: `echo "$LEASE_VAR $CMD_VAR $OVERRIDE"`,
			Env:    map[string]string{"CMD_VAR": "cmd value", "OVERRIDE": "cmd"},
		})
		wantExit(t, res, 0)
		if out != "lease cmd value cmd\n" {
			t.Fatalf("stdout %q", out)
		}
	})
	t.Run("EnvNotInherited", func(t *testing.T) {
		t.Setenv("BOTHY_AGENT_SECRET", "s3cret")
		res, out, _ := Exec(t, p, h, bothy.ExecSpec{Script: `echo "[$BOTHY_AGENT_SECRET]"`})
		wantExit(t, res, 0)
		if out != "[]\n" {
			t.Fatalf("the agent's environment leaked into a command: %q", out)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				var out bytes.Buffer
				res, err := p.Exec(context.Background(), h, bothy.ExecSpec{Script: fmt.Sprintf("sleep 0.2; echo %d", i), Stdout: &out, Timeout: 30 * time.Second})
				if err != nil || res.ExitCode != 0 || out.String() != fmt.Sprintf("%d\n", i) {
					t.Errorf("command %d: result %+v, error %v, stdout %q", i, res, err, out.String())
				}
			})
		}
		wg.Wait()
	})
}

func testWorkspace(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	p := newProvider(t)
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "sub", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "sub", "given.txt"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, _ := Start(t, p, bothy.LeaseSpec{Workspace: ws})

	t.Run("Cwd", func(t *testing.T) {
		res, out, _ := Exec(t, p, h, bothy.ExecSpec{Script: "cat given.txt; basename \"$PWD\"", Cwd: "sub"})
		wantExit(t, res, 0)
		if out != "from the host\nsub\n" {
			t.Fatalf("stdout %q", out)
		}
		res, out, _ = Exec(t, p, h, bothy.ExecSpec{Script: "basename \"$PWD\"", Cwd: "./sub//deeper/../deeper/"})
		wantExit(t, res, 0)
		if out != "deeper\n" {
			t.Fatalf("stdout %q", out)
		}
	})
	t.Run("CwdEscape", func(t *testing.T) {
		for _, cwd := range []string{"..", "../..", "sub/../../x", "/", "/etc", "/tmp/x", "a\x00b"} {
			_, err := p.Exec(context.Background(), h, bothy.ExecSpec{Argv: []string{"pwd"}, Cwd: cwd})
			if code := bothy.ErrorCode(err); code != bothy.EINVALIDPATH {
				t.Errorf("cwd %q: error %v (code %q), want %s", cwd, err, code, bothy.EINVALIDPATH)
			}
		}
	})
	t.Run("MissingCwd", func(t *testing.T) {
		// A working directory that does not exist, or is not a
		// directory, is an error of the run, not an exit status of the
		// command.
		for _, cwd := range []string{"no/such/dir", "sub/given.txt"} {
			res, err := p.Exec(context.Background(), h, bothy.ExecSpec{Argv: []string{"pwd"}, Cwd: cwd, Timeout: 10 * time.Second})
			if code := bothy.ErrorCode(err); code != bothy.EINVALIDPATH {
				t.Errorf("cwd %q: result %+v, error %v (code %q), want %s", cwd, res, err, code, bothy.EINVALIDPATH)
			}
		}
		res, out, _ := Exec(t, p, h, bothy.ExecSpec{Script: "basename \"$PWD\"", Cwd: "sub"})
		wantExit(t, res, 0)
		if out != "sub\n" {
			t.Fatalf("after a missing cwd: stdout %q", out)
		}
	})
	t.Run("WritesAppearOnHost", func(t *testing.T) {
		res, _, errOut := Exec(t, p, h, bothy.ExecSpec{Script: "echo data > out.txt && mkdir -p made/inner && printf x > made/inner/f && echo more >> sub/given.txt"})
		wantExit(t, res, 0)
		if errOut != "" {
			t.Fatalf("stderr %q", errOut)
		}
		for name, want := range map[string]string{
			"out.txt":       "data\n",
			"made/inner/f":  "x",
			"sub/given.txt": "from the host\nmore\n",
		} {
			b, err := os.ReadFile(filepath.Join(ws, name))
			if err != nil || string(b) != want {
				t.Errorf("host file %s: %q, %v; want %q", name, b, err, want)
			}
		}
	})
}

func testKill(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	p := newProvider(t)
	h, _ := Start(t, p, bothy.LeaseSpec{})

	t.Run("TimeoutKillsTree", func(t *testing.T) {
		m := Marker()
		start := time.Now()
		res, _, _ := Exec(t, p, h, bothy.ExecSpec{
			Script:  fmt.Sprintf("(sleep %s &); sleep %s & sleep %s", m, m, m),
			Timeout: 500 * time.Millisecond,
		})
		if !res.TimedOut {
			t.Fatalf("result %+v, want TimedOut", res)
		}
		if res.ExitCode == 0 {
			t.Fatalf("a timed-out command exited 0")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("timeout of 500ms took %v", d)
		}
		wantNoProcess(t, p, h, m)
	})
	for _, c := range []struct{ name, script string }{
		{"CancelKillsTree", "(sleep %[1]s &); sleep %[1]s & sleep %[1]s"},
		{"Cancel", "sleep %[1]s & sleep %[1]s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := Marker()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := p.Exec(ctx, h, bothy.ExecSpec{Script: fmt.Sprintf(c.script, m), Timeout: 20 * time.Second})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v, want context.DeadlineExceeded", err)
			}
			wantNoProcess(t, p, h, m)
		})
	}
}

// testBackground checks that what a command leaves running when it exits
// on its own is there for the next command, until Stop.
func testBackground(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	p := newProvider(t)
	h, _ := Start(t, p, bothy.LeaseSpec{})
	m := Marker()

	t.Run("Survives", func(t *testing.T) {
		start := time.Now()
		// The second sleep keeps the output pipes open: Exec returns anyway.
		res, out, _ := Exec(t, p, h, bothy.ExecSpec{Script: fmt.Sprintf("sleep %s >/dev/null 2>&1 & echo $! > bg.pid; (sleep %s &); echo started", m, m)})
		wantExit(t, res, 0)
		if out != "started\n" {
			t.Fatalf("stdout %q", out)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("a command that left background processes took %v", d)
		}
		res, out, errOut := Exec(t, p, h, bothy.ExecSpec{Script: `kill -0 "$(cat bg.pid)" && echo alive`})
		if res.ExitCode != 0 || out != "alive\n" {
			t.Fatalf("the background process of the previous command: result %+v stdout %q stderr %q", res, out, errOut)
		}
		if procs := ProcessesOf(t, p, h, m); len(procs) != 2 {
			t.Fatalf("background processes %v, want 2", procs)
		}
	})
	t.Run("ServerAnswers", func(t *testing.T) {
		port := 20000 + int(time.Now().UnixNano()%40000)
		server := fmt.Sprintf(`command -v perl >/dev/null || exit 77
perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:%d", Listen => 5, ReuseAddr => 1) or die "listen: $!"; while ($c = $s->accept) { print $c "pong\n"; close $c }' >/dev/null 2>&1 &`, port)
		res, _, errOut := Exec(t, p, h, bothy.ExecSpec{Script: server})
		if res.ExitCode == 77 {
			testenv.Skip(t, "no perl to listen with")
		}
		wantExit(t, res, 0)
		client := fmt.Sprintf(`for i in $(seq 100); do exec 3<>/dev/tcp/127.0.0.1/%d && break; sleep 0.05; done 2>/dev/null; cat <&3`, port)
		res, out, errOut := Exec(t, p, h, bothy.ExecSpec{Script: client, Timeout: 20 * time.Second})
		if res.ExitCode != 0 || out != "pong\n" {
			t.Fatalf("the server of the previous command: result %+v stdout %q stderr %q", res, out, errOut)
		}
	})
	t.Run("StopKillsBackground", func(t *testing.T) {
		if res, err := p.Stop(context.Background(), h); err != nil || !res.Empty() {
			t.Fatalf("Stop: residue %+v, error %v", res, err)
		}
		wantNoProcess(t, p, h, m)
	})
}

func testStop(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	p := newProvider(t)
	h, _ := Start(t, p, bothy.LeaseSpec{})
	m := Marker()
	done := make(chan error, 1)
	go func() {
		_, err := p.Exec(context.Background(), h, bothy.ExecSpec{Script: fmt.Sprintf("(sleep %s &); sleep %s", m, m), Timeout: 30 * time.Second})
		done <- err
	}()
	waitProcess(t, p, h, m)

	res, err := p.Stop(context.Background(), h)
	if err != nil || res == nil || !res.Empty() {
		t.Fatalf("Stop: residue %+v, error %v", res, err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a running command did not end after Stop")
	}
	wantNoProcess(t, p, h, m)

	t.Run("Idempotent", func(t *testing.T) {
		res, err := p.Stop(context.Background(), h)
		if err != nil || res == nil || !res.Empty() {
			t.Fatalf("second Stop: residue %+v, error %v", res, err)
		}
	})
	t.Run("ExecAfterStop", func(t *testing.T) {
		_, err := p.Exec(context.Background(), h, bothy.ExecSpec{Argv: []string{"true"}})
		if code := bothy.ErrorCode(err); code != bothy.ENOTFOUND {
			t.Fatalf("error %v (code %q), want %s", err, code, bothy.ENOTFOUND)
		}
	})
}

func testRecover(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	p := newProvider(t)
	h, ws := Start(t, p, bothy.LeaseSpec{Env: map[string]string{"KEPT": "yes"}})
	b, err := h.Encode()
	if err != nil {
		t.Fatal(err)
	}
	res, _, _ := Exec(t, p, h, bothy.ExecSpec{Script: fmt.Sprintf("sleep %s >/dev/null 2>&1 & echo $! > bg.pid", Marker())})
	wantExit(t, res, 0)

	t.Run("OK", func(t *testing.T) {
		p2 := newProvider(t)
		h2, err := p2.Recover(context.Background(), b)
		if err != nil {
			t.Fatalf("Recover: %v", err)
		}
		if h2.LeaseID != h.LeaseID || h2.Generation != h.Generation || h2.Provider != p.Name() {
			t.Fatalf("recovered handle %+v, want lease %s generation %d", h2, h.LeaseID, h.Generation)
		}
		res, out, _ := Exec(t, p2, h2, bothy.ExecSpec{Script: `echo "$KEPT" > recovered.txt; cat recovered.txt`})
		wantExit(t, res, 0)
		if out != "yes\n" {
			t.Fatalf("stdout %q", out)
		}
		if got, _ := os.ReadFile(filepath.Join(ws, "recovered.txt")); string(got) != "yes\n" {
			t.Fatalf("host file %q", got)
		}
		// The same sandbox: a background process from before is there.
		res, out, errOut := Exec(t, p2, h2, bothy.ExecSpec{Script: `kill -0 "$(cat bg.pid)" && echo alive`})
		if res.ExitCode != 0 || out != "alive\n" {
			t.Fatalf("background process after Recover: result %+v stdout %q stderr %q", res, out, errOut)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		bad := map[string][]byte{
			"garbage":        []byte("not json"),
			"version":        bytes.Replace(b, []byte(`"v":1`), []byte(`"v":99`), 1),
			"other provider": bytes.Replace(b, []byte(`"provider":"`+p.Name()+`"`), []byte(`"provider":"elsewhere"`), 1),
		}
		for name, handle := range bad {
			if _, err := p.Recover(context.Background(), handle); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("%s: error %v, want %s", name, err, bothy.EINVALID)
			}
		}
	})
}

func testValidate(t *testing.T, newProvider func(t *testing.T) bothy.Provider) {
	p := newProvider(t)
	ws := t.TempDir()
	for name, spec := range map[string]bothy.LeaseSpec{
		"no lease id":       {ComputerID: "c1", Generation: 1, Workspace: ws},
		"generation 0":      {LeaseID: NewID("l"), ComputerID: "c1", Workspace: ws},
		"relative dir":      {LeaseID: NewID("l"), ComputerID: "c1", Generation: 1, Workspace: "ws"},
		"missing dir":       {LeaseID: NewID("l"), ComputerID: "c1", Generation: 1, Workspace: filepath.Join(ws, "missing")},
		"negative limit":    {LeaseID: NewID("l"), ComputerID: "c1", Generation: 1, Workspace: ws, Limits: bothy.Limits{Pids: -1}},
		"bad env name":      {LeaseID: NewID("l"), ComputerID: "c1", Generation: 1, Workspace: ws, Env: map[string]string{"A=B": "x"}},
		"lease id with '/'": {LeaseID: "a/b", ComputerID: "c1", Generation: 1, Workspace: ws},
	} {
		if _, err := p.Start(context.Background(), spec); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Errorf("Start with %s: error %v, want %s", name, err, bothy.EINVALID)
		}
	}
	h, _ := Start(t, p, bothy.LeaseSpec{})
	for name, spec := range map[string]bothy.ExecSpec{
		"nothing":          {},
		"argv and script":  {Argv: []string{"true"}, Script: "true"},
		"empty program":    {Argv: []string{""}},
		"negative timeout": {Argv: []string{"true"}, Timeout: -1},
		"bad env name":     {Argv: []string{"true"}, Env: map[string]string{"1X": "y"}},
	} {
		if _, err := p.Exec(context.Background(), h, spec); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Errorf("Exec with %s: error %v, want %s", name, err, bothy.EINVALID)
		}
	}
}

// Start starts a sandbox for spec, filling LeaseID, ComputerID, Generation
// and Workspace (a new temporary directory) when they are empty, and stops
// it when the test ends, failing the test if Stop reports residue. It
// returns the handle and the workspace directory.
func Start(t testing.TB, p bothy.Provider, spec bothy.LeaseSpec) (*bothy.SandboxHandle, string) {
	t.Helper()
	if spec.LeaseID == "" {
		spec.LeaseID = NewID("lease")
	}
	if spec.ComputerID == "" {
		spec.ComputerID = NewID("computer")
	}
	if spec.Generation == 0 {
		spec.Generation = 1
	}
	if spec.Workspace == "" {
		spec.Workspace = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := p.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if res, err := p.Stop(context.Background(), h); err != nil || !res.Empty() {
			t.Errorf("Stop at cleanup: residue %+v, error %v", res, err)
		}
	})
	return h, spec.Workspace
}

// Exec runs spec with a 30 s timeout unless it has one, failing the test
// on an error, and returns the result and the output.
func Exec(t testing.TB, p bothy.Provider, h *bothy.SandboxHandle, spec bothy.ExecSpec) (res *bothy.ExecResult, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	spec.Stdout, spec.Stderr = &out, &errOut
	if spec.Timeout == 0 {
		spec.Timeout = 30 * time.Second
	}
	res, err := p.Exec(context.Background(), h, spec)
	if err != nil {
		t.Fatalf("Exec %q%q: %v (stderr %q)", spec.Argv, spec.Script, err, errOut.String())
	}
	return res, out.String(), errOut.String()
}

func wantExit(t testing.TB, res *bothy.ExecResult, code int) {
	t.Helper()
	if res.ExitCode != code {
		t.Fatalf("exit code %d, want %d (result %+v)", res.ExitCode, code, res)
	}
}

// NewID returns a fresh identifier with the given prefix.
func NewID(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// Marker returns a unique duration for `sleep`, such as "300.123456", so
// that a test can find the processes of its own command on the host.
func Marker() string {
	b := make([]byte, 4)
	rand.Read(b)
	n := uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	return "300." + strconv.FormatUint(n%1000000000+1000000000, 10)
}

// Processes returns the host pids whose command line contains s.
func Processes(s string) []int {
	return sandbox.Processes(func(pid int) bool {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		return err == nil && bytes.Contains(b, []byte(s))
	})
}

// WantNoProcess fails the test if a host process whose command line holds
// marker is still alive half a second from now.
func WantNoProcess(t testing.TB, marker string) {
	t.Helper()
	wantNoProcess(t, nil, nil, marker)
}

// ProcessesOf returns the host pids and, if p is a ProcessLister, the
// command lines of the processes in h's sandbox, whose command line holds
// marker.
func ProcessesOf(t testing.TB, p bothy.Provider, h *bothy.SandboxHandle, marker string) []string {
	t.Helper()
	var out []string
	for _, pid := range Processes(marker) {
		out = append(out, "host pid "+strconv.Itoa(pid))
	}
	if l, ok := p.(ProcessLister); ok {
		cmds, err := l.SandboxProcesses(context.Background(), h)
		if err != nil {
			t.Fatalf("SandboxProcesses: %v", err)
		}
		for _, c := range cmds {
			if strings.Contains(c, marker) {
				out = append(out, "sandbox "+strconv.Quote(c))
			}
		}
	}
	return out
}

// wantNoProcess fails the test if a process whose command line holds
// marker is still alive, on the host or, if p is a ProcessLister, in h's
// sandbox, half a second from now.
func wantNoProcess(t testing.TB, p bothy.Provider, h *bothy.SandboxHandle, marker string) {
	t.Helper()
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		procs := ProcessesOf(t, p, h, marker)
		if len(procs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of the command (marker %s) are still alive", procs, marker)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitProcess(t testing.TB, p bothy.Provider, h *bothy.SandboxHandle, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(ProcessesOf(t, p, h, marker)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the command's process (marker %s) never appeared", marker)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

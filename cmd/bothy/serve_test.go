package main

import (
	"bufio"
	"context"
	"io"
	nethttp "net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
)

// envRunMain makes the test binary run main instead of the tests, so that
// tests start the real bothy command as a subprocess without building it.
const envRunMain = "BOTHY_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// bothyCmd returns the bothy command with args, run from the test binary.
func bothyCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envRunMain+"=1")
	return cmd
}

// server is a running `bothy serve` and the two lines it printed.
type server struct {
	cmd          *exec.Cmd
	url, tokenLn string
	caLn         string // serve's third line over TLS: export BOTHY_CA=...
	stderr       *syncBuffer
}

func startServe(t *testing.T, data string) *server {
	t.Helper()
	return startServeWith(t, data, nil)
}

// startServeWith starts `bothy serve` on data with extra environment
// variables and arguments.
func startServeWith(t *testing.T, data string, env []string, args ...string) *server {
	t.Helper()
	cleanupOnFailure(t, data)
	cmd := bothyCmd(t, append([]string{"serve", "--data", data, "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(cmd.Env, env...)
	return startServeCmd(t, cmd)
}

// startServeCmd starts cmd, a `bothy serve` command, and waits for the two
// lines it prints.
func startServeCmd(t *testing.T, cmd *exec.Cmd) *server {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := startProcess(t, "serve", cmd)
	lines := make(chan []string, 1)
	go func() {
		var ls []string
		sc := bufio.NewScanner(out)
		// Over TLS a third line names the self-signed CA.
		for (len(ls) < 2 || (len(ls) < 3 && strings.HasPrefix(ls[0], "export BOTHY_URL=https:"))) && sc.Scan() {
			ls = append(ls, sc.Text())
		}
		lines <- ls
		io.Copy(io.Discard, out)
	}()
	select {
	case ls := <-lines:
		if len(ls) < 2 {
			t.Fatalf("bothy serve printed %q; stderr:\n%s", ls, s.stderr)
		}
		var ok bool
		if s.url, ok = strings.CutPrefix(ls[0], "export BOTHY_URL="); !ok || !(strings.HasPrefix(s.url, "http://127.0.0.1:") || strings.HasPrefix(s.url, "https://127.0.0.1:")) {
			t.Fatalf("first line %q, want export BOTHY_URL=http://127.0.0.1:PORT", ls[0])
		}
		s.tokenLn = ls[1]
		if len(ls) == 3 {
			s.caLn = ls[2]
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("bothy serve printed nothing in 30s; stderr:\n%s", s.stderr)
	}
	return s
}

// startProcess starts cmd, a `bothy NAME` command, with its stderr in the
// returned server; at the end of the test it kills the process if it still
// runs and, if the test failed, logs its stderr.
func startProcess(t *testing.T, name string, cmd *exec.Cmd) *server {
	t.Helper()
	s := &server{cmd: cmd, stderr: newSyncBuffer()}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("bothy %s stderr:\n%s", name, s.stderr)
		}
	})
	return s
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("bothy serve exited with %v; stderr:\n%s", err, s.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("bothy serve did not stop on SIGTERM; stderr:\n%s", s.stderr)
	}
}

func TestServe(t *testing.T) {
	data := t.TempDir()
	s := startServe(t, data)
	tokenPath := filepath.Join(data, "admin.token")

	// The token line holds the secret, which the file holds too, mode 0600.
	token, ok := strings.CutPrefix(s.tokenLn, "export BOTHY_TOKEN=")
	if !ok || !strings.HasPrefix(token, bothy.TokenPrefix) {
		t.Fatalf("second line %q, want export BOTHY_TOKEN=%s...", s.tokenLn, bothy.TokenPrefix)
	}
	fi, err := os.Stat(tokenPath)
	if err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("admin.token mode %04o, want 0600", fi.Mode().Perm())
	}
	if b, err := os.ReadFile(tokenPath); err != nil || strings.TrimSpace(string(b)) != token {
		t.Fatalf("admin.token holds %q (%v), want the printed token", b, err)
	}

	resp, err := nethttp.Get(s.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/healthz: %s", resp.Status)
	}
	ctx := t.Context()
	c := bhttp.NewClient(s.url, token)
	cm, err := c.CreateComputer(ctx, bhttp.CreateComputerRequest{Label: "serve-test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, "", cm.ID, "notes/a.txt", strings.NewReader("kept"), bothy.WriteOptions{MkdirParents: true}); err != nil {
		t.Fatal(err)
	}

	// A token made by the admin verb works against the running server,
	// within its scopes, for its own (new) tenant.
	cmd := bothyCmd(t, "admin", "token", "create", "--data", data, "--tenant", "t2", "--owner", "bob", "--scopes", "computers:read")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("admin token create: %v", err)
	}
	c2 := bhttp.NewClient(s.url, strings.TrimSpace(string(out)))
	if cs, err := c2.ListComputers(ctx, bothy.ComputerFilter{}); err != nil || len(cs) != 0 {
		t.Fatalf("tenant t2 lists %d computers, %v", len(cs), err)
	}
	if _, err := c2.CreateComputer(ctx, bhttp.CreateComputerRequest{}); bothy.ErrorCode(err) != bothy.EFORBIDDEN {
		t.Fatalf("create with computers:read only: %v, want forbidden", err)
	}
	s.stop(t)

	// A restart keeps the token and the files, and prints only where the
	// token is; a token file someone made readable by others is tightened.
	if err := os.Chmod(tokenPath, 0o644); err != nil {
		t.Fatal(err)
	}
	s = startServe(t, data)
	if fi, err := os.Stat(tokenPath); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("after restart admin.token mode is %04o, want 0600", fi.Mode().Perm())
	}
	if strings.Contains(s.tokenLn, token) || !strings.Contains(s.tokenLn, tokenPath) {
		t.Errorf("restart printed %q, want the token file's path and not the token", s.tokenLn)
	}
	c = bhttp.NewClient(s.url, token)
	rc, _, err := c.ReadFile(ctx, "", cm.ID, "notes/a.txt", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "kept" {
		t.Errorf("after restart the file holds %q", b)
	}
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.stop(t)
}

func TestAdminTokenCreate_ErrInvalid(t *testing.T) {
	data := t.TempDir()
	for _, args := range [][]string{
		{"admin", "token", "create", "--data", data, "--tenant", "t"},                                     // no owner
		{"admin", "token", "create", "--data", data, "--tenant", "t", "--owner", "o", "--scopes", "root"}, // unknown scope
		{"admin", "tokens"},
	} {
		if err := bothyCmd(t, args...).Run(); err == nil {
			t.Errorf("bothy %q succeeded", args)
		}
	}
}

// TestServe_ProcessProviderRefused: a profile served by the process
// provider, which isolates nothing, is refused unless the configuration
// enables it; an unknown provider is refused too.
func TestServe_ProcessProviderRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--profiles", "standard=process"}, "--allow-process"},
		{[]string{"--profiles", "standard=docker"}, "unknown provider"},
		{[]string{"--profiles", "standard"}, "NAME=PROVIDER"},
		{[]string{"--lease-memory", "lots"}, "--lease-memory"},
		{[]string{"--lease-memory", "1MiB"}, "at least 32MiB"},
		{[]string{"--lease-cpus", "0"}, "--lease-cpus"},
	} {
		cmd := bothyCmd(t, append([]string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("serve %q: %v, output %q; want a failure naming %q", tc.args, err, out, tc.want)
		}
	}
	// Enabled, it serves the profile: the server starts.
	data := t.TempDir()
	s := startServeWith(t, data, nil, "--profiles", "standard=bwrap,dev=process", "--allow-process")
	s.stop(t)
}

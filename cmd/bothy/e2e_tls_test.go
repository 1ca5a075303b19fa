package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	bserver "github.com/bothyhq/bothy/server"
)

// tlsAPI is an API client of a TLS server that trusts the CA serve printed.
func tlsAPI(t *testing.T, s *server, data string) (*apiClient, string) {
	t.Helper()
	ca, ok := strings.CutPrefix(s.caLn, "export BOTHY_CA=")
	if !ok {
		t.Fatalf("serve did not print BOTHY_CA (third line %q)", s.caLn)
	}
	ca = strings.Trim(ca, "'")
	a := newAPI(t, s, serverToken(t, s, data))
	hc, _, err := caClient(ca)
	if err != nil {
		t.Fatal(err)
	}
	a.c.HTTPClient = hc
	return a, ca
}

// TestE2E_TLSSelfSigned (issue "Hardening", item 7): `bothy serve
// --tls-self-signed` serves HTTPS only, with a certificate from a CA it
// makes in DATA/tls and whose fingerprint it logs; a client that trusts
// that CA (BOTHY_CA for the CLI) works, the in-process agent runs
// commands over it, and a client that does not is refused. No agent
// token is on disk.
func TestE2E_TLSSelfSigned(t *testing.T) {
	needSandbox(t)
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "agent.token"), []byte("bat_"+strings.Repeat("0", 64)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServeWith(t, data, nil, "--tls-self-signed")
	if !strings.HasPrefix(s.url, "https://127.0.0.1:") {
		t.Fatalf("BOTHY_URL %q, want https", s.url)
	}
	a, ca := tlsAPI(t, s, data)
	if ca != filepath.Join(data, "tls", "ca.pem") {
		t.Errorf("BOTHY_CA %q, want DATA/tls/ca.pem", ca)
	}
	if fi, err := os.Stat(filepath.Join(data, "tls", "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the CA's key: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	b, _ := os.ReadFile(ca)
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("ca.pem holds no PEM: %q", b)
	}
	sum := sha256.Sum256(block.Bytes)
	// serve logs before it prints, but its stderr is copied on its own.
	want := "fingerprint=sha256:" + hex.EncodeToString(sum[:])
	for i := 0; i < 50 && !strings.Contains(s.stderr.String(), want); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(s.stderr.String(), want) {
		t.Errorf("serve did not log the CA's fingerprint sha256:%x:\n%s", sum, s.stderr)
	}
	if _, err := os.Stat(filepath.Join(data, "agent.token")); !os.IsNotExist(err) {
		t.Errorf("DATA/agent.token is still there: %v", err)
	}

	// Through the CA: the API and the in-process agent.
	c := a.create("tls")
	cmd := a.run(c.ID, bothy.RunRequest{Argv: []string{"echo", "over tls"}, Wait: true})
	if out := output(a.events(cmd.ID, 0, nil)); cmd.State != bothy.CommandCompleted || out != "over tls\n" {
		t.Fatalf("command over TLS: %s %q", cmd.State, out)
	}
	// The CLI trusts BOTHY_CA.
	run := bothyCmd(t, "run", c.ID, "--", "echo", "from the cli")
	run.Env = append(run.Env, "BOTHY_URL="+s.url, "BOTHY_TOKEN="+a.c.Token, "BOTHY_CA="+ca)
	if out, err := run.Output(); err != nil || string(out) != "from the cli\n" {
		t.Errorf("bothy run with BOTHY_CA: %v, %q", err, out)
	}
	// Without it, the certificate is refused; plain HTTP gets no API.
	run = bothyCmd(t, "ls")
	run.Env = append(run.Env, "BOTHY_URL="+s.url, "BOTHY_TOKEN="+a.c.Token, "BOTHY_CA=")
	if out, err := run.CombinedOutput(); err == nil || !strings.Contains(string(out), "certificate") {
		t.Errorf("bothy ls without the CA: %v, %q; want a certificate error", err, out)
	}
	plain := bothyCmd(t, "ls")
	plain.Env = append(plain.Env, "BOTHY_URL="+strings.Replace(s.url, "https:", "http:", 1), "BOTHY_TOKEN="+a.c.Token)
	if out, err := plain.CombinedOutput(); err == nil {
		t.Errorf("plain HTTP to the TLS listener worked: %q", out)
	}
	destroyAll(t, a, data)
	s.stop(t)
}

// TestE2E_AgentEnrol (issue "Hardening", item 7): an agent on another
// host enrols with a one-time join token over TLS, checking the control
// plane's certificate against the CA file it was given: it gets an agent
// token of its own that expires (kept in DATA/agent-credential.json,
// 0600), runs commands with it, and starts again from it; the join token
// is spent, and an agent that does not trust the CA cannot enrol.
func TestE2E_AgentEnrol(t *testing.T) {
	needSandbox(t)
	data, agentData := t.TempDir(), t.TempDir()
	s := startServeWith(t, data, nil, "--tls-self-signed", "--no-agent")
	a, ca := tlsAPI(t, s, data)
	out, err := bothyCmd(t, "admin", "agent", "join", "--data", data, "--id", "e2e-enrol").Output()
	if err != nil {
		t.Fatalf("admin agent join: %v", err)
	}
	joinFile := filepath.Join(t.TempDir(), "join.token")
	if err := os.WriteFile(joinFile, out, 0o600); err != nil {
		t.Fatal(err)
	}
	agent := func(dir string, extra ...string) *server {
		args := append([]string{"agent", "--control", s.url, "--id", "e2e-enrol", "--data", dir, "--blobs", filepath.Join(data, "blobs")}, extra...)
		return startProcess(t, "agent", bothyCmd(t, args...))
	}
	// Without the CA the agent does not enrol, and does not spend the token.
	untrusting := agent(t.TempDir(), "--join-token-file", joinFile)
	if err := waitExit(untrusting, 30*time.Second); err == nil || !strings.Contains(untrusting.stderr.String(), "certificate") {
		t.Fatalf("an agent that does not trust the CA: %v\n%s", err, untrusting.stderr)
	}
	ag := agent(agentData, "--join-token-file", joinFile, "--ca-file", ca)
	c := a.create("enrolled")
	cmd := a.run(c.ID, bothy.RunRequest{Argv: []string{"echo", "enrolled"}, Wait: true})
	if got := output(a.events(cmd.ID, 0, nil)); cmd.State != bothy.CommandCompleted || got != "enrolled\n" {
		t.Fatalf("command on the enrolled agent: %s %q\n%s", cmd.State, got, ag.stderr)
	}
	credPath := filepath.Join(agentData, bserver.CredentialFile)
	fi, err := os.Stat(credPath)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the credential file: %v, mode %v", err, fi.Mode().Perm())
	}
	var cred struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	b, _ := os.ReadFile(credPath)
	if err := json.Unmarshal(b, &cred); err != nil || !strings.HasPrefix(cred.Token, bothy.TokenPrefix) || time.Until(cred.ExpiresAt) > 25*time.Hour || time.Until(cred.ExpiresAt) < time.Hour {
		t.Errorf("the credential %s (%v): want an agent token expiring in about 24h", b, err)
	}
	// The join token is spent: another agent cannot use it.
	again := agent(t.TempDir(), "--join-token-file", joinFile, "--ca-file", ca)
	if err := waitExit(again, 30*time.Second); err == nil || !strings.Contains(again.stderr.String(), "unauthorized") {
		t.Errorf("a second use of the join token: %v\n%s", err, again.stderr)
	}
	// Restarted, the agent polls with the credential it kept.
	a.stop(c.ID)
	ag.stop(t)
	agent(agentData, "--ca-file", ca)
	cmd = a.run(c.ID, bothy.RunRequest{Argv: []string{"echo", "again"}, Wait: true})
	if got := output(a.events(cmd.ID, 0, nil)); cmd.State != bothy.CommandCompleted || got != "again\n" {
		t.Errorf("command after the agent restarted: %s %q", cmd.State, got)
	}
	destroyAll(t, a, agentData)
	s.stop(t)
}

// waitExit waits for a process to exit by itself and returns its error.
func waitExit(s *server, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		s.cmd.Process.Kill()
		<-done
		return nil
	}
}

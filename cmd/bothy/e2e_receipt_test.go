package main

import (
	"bytes"
	"encoding/json"
	"errors"
	nethttp "net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
)

// TestE2E_Receipts runs a command with a work_job_id on a real sandbox,
// fetches its receipt and verifies it with `bothy receipt verify` against
// the server's published key; one flipped byte makes verification fail.
// After destroy, the lease's receipt states a clean release.
func TestE2E_Receipts(t *testing.T) {
	needSandbox(t)
	data := t.TempDir()
	s := startServeWith(t, data, nil)
	tok := serverToken(t, s, data)
	a := newAPI(t, s, tok)
	if fi, err := os.Stat(filepath.Join(data, "receipt.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("DATA/receipt.key: %v %v", fi, err)
	}
	// The key is public: no token needed.
	resp, err := nethttp.Get(s.url + "/v1/receipts/key")
	if err != nil {
		t.Fatal(err)
	}
	var key bothy.ReceiptKey
	json.NewDecoder(resp.Body).Decode(&key)
	resp.Body.Close()
	if resp.StatusCode != 200 || key.Algorithm != "ed25519" || len(key.PublicKey) != 32 {
		t.Fatalf("GET /v1/receipts/key: %d %+v", resp.StatusCode, key)
	}

	c := a.createWith(bhttp.CreateComputerRequest{Label: "receipts", WorkJobID: "job-computer"})
	if c.WorkJobID != "job-computer" {
		t.Fatalf("computer work_job_id = %q", c.WorkJobID)
	}
	slow := a.run(c.ID, bothy.RunRequest{Argv: []string{"sleep", "2"}})
	if st, raw := a.call("GET", "/v1/commands/"+slow.ID+"/receipt", nil, nil); st != 404 {
		t.Errorf("receipt of a running command: %d %s, want 404", st, raw)
	}
	a.wait(slow.ID)
	cmd := a.run(c.ID, bothy.RunRequest{Script: "echo hi > out.txt; exit 3", WorkJobID: "job-77", Wait: true})
	if cmd.State != bothy.CommandCompleted || cmd.ExitCode == nil || *cmd.ExitCode != 3 || cmd.WorkJobID != "job-77" {
		t.Fatalf("command: %+v", cmd)
	}

	env := []string{"BOTHY_URL=" + s.url, "BOTHY_TOKEN=" + tok}
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		c := bothyCmd(t, args...)
		c.Env = append(c.Env, env...)
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return out.String(), errb.String(), c.ProcessState.ExitCode()
	}
	out, errs, code := cli("receipt", "get", cmd.ID)
	if code != 0 {
		t.Fatalf("receipt get: %d %s", code, errs)
	}
	file := filepath.Join(t.TempDir(), "receipt.json")
	os.WriteFile(file, []byte(out), 0o644)
	if out, errs, code := cli("receipt", "verify", file); code != 0 || !strings.HasPrefix(out, "valid: command "+cmd.ID) {
		t.Fatalf("receipt verify: exit %d, %q %q", code, out, errs)
	}
	var r struct {
		Body bothy.ReceiptBody `json:"body"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	b := r.Body
	if b.CommandID != cmd.ID || b.ComputerID != c.ID || b.WorkJobID != "job-77" || b.Provider != "bwrap" ||
		b.ExitCode == nil || *b.ExitCode != 3 || b.State != bothy.CommandCompleted || b.LeaseID != cmd.LeaseID ||
		b.RevisionAfter != cmd.RevisionAfter || b.RevisionAfter <= b.RevisionBefore || b.KeyID != key.KeyID {
		t.Errorf("receipt body: %+v", b)
	}
	// One flipped byte, in the body or in the signature, fails.
	for _, at := range []int{strings.Index(out, "job-77") + 5, strings.Index(out, `"signature":"`) + 20} {
		flipped := []byte(out)
		flipped[at] ^= 0x01
		bad := filepath.Join(t.TempDir(), "tampered.json")
		os.WriteFile(bad, flipped, 0o644)
		if out, errs, code := cli("receipt", "verify", bad); code != 1 || !strings.Contains(errs, "does not verify") {
			t.Errorf("tampered receipt (byte %d): exit %d, %q %q", at, code, out, errs)
		}
	}

	a.destroy(c.ID)
	out, errs, code = cli("receipt", "get", cmd.LeaseID)
	if code != 0 {
		t.Fatalf("receipt get lease: %d %s", code, errs)
	}
	lease := filepath.Join(t.TempDir(), "lease.json")
	os.WriteFile(lease, []byte(out), 0o644)
	keyFile := filepath.Join(t.TempDir(), "key.json")
	kj, _ := json.Marshal(key)
	os.WriteFile(keyFile, kj, 0o644)
	if vout, errs, code := cli("receipt", "verify", "--key", keyFile, lease); code != 0 {
		t.Fatalf("verify lease receipt: exit %d, %q %q", code, vout, errs)
	}
	var lr struct {
		Body bothy.ReceiptBody `json:"body"`
	}
	json.Unmarshal([]byte(out), &lr)
	if lr.Body.Kind != bothy.ReceiptLease || lr.Body.LeaseID != cmd.LeaseID || lr.Body.Disposition != bothy.LeaseReleased ||
		string(lr.Body.Residue) != "{}" || lr.Body.WorkJobID != "job-computer" || lr.Body.RevisionAfter < cmd.RevisionAfter {
		t.Errorf("lease receipt: %s", out)
	}
	destroyAll(t, a, data)
	s.stop(t)
}

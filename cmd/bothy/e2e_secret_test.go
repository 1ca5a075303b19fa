package main

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
)

// TestE2E_Secrets: a secret stored with `bothy admin secret put` and named
// by a command reaches the command's environment, and its value, in the
// forms a command would print it (exact, base64, hex, percent-encoded,
// split across two writes), never appears in the command's events, its
// output archive, the journal, the database or any pack: the test scans
// every file of the data directory but the secret store, while the lease
// runs and after it was stopped, and greps the revision's files. No
// process of the sandbox holds a lease credential, an agent token or an
// API token in its environment, and the host's token files are not
// reachable from it.
func TestE2E_Secrets(t *testing.T) {
	needSandbox(t)
	data := t.TempDir()
	secret := "s3cr3t/Value+with=sym&bols_" + strings.Repeat("x9", 4)
	put := bothyCmd(t, "admin", "secret", "put", "--data", data, "--tenant", "default", "gh")
	put.Stdin = strings.NewReader(secret + "\n")
	if out, err := put.CombinedOutput(); err != nil {
		t.Fatalf("admin secret put: %v: %s", err, out)
	}
	s := startServe(t, data)
	a := newAPI(t, s, serverToken(t, s, data))
	c := a.create("secrets")

	script := `echo "sha=$(printf %s "$GH_TOKEN" | sha256sum | cut -c1-64)"
echo hello > note.txt
echo "exact:$GH_TOKEN"
printf %s "$GH_TOKEN" | base64 -w0; echo
printf %s "$GH_TOKEN" | od -An -tx1 | tr -d ' \n'; echo
perl -e 'print join("", map { sprintf "%%%02X", ord } split //, $ENV{GH_TOKEN}), "\n"'
printf %s "${GH_TOKEN:0:7}"; sleep 0.3; printf '%s\n' "${GH_TOKEN:7}"
echo "on stderr: $GH_TOKEN" >&2
echo "$GH_TOKEN" > /tmp/not-in-the-workspace
case "$GH_FILE" in /dev/fd/*) echo "file:$(cat "$GH_FILE")";; *) echo "no file: $GH_FILE";; esac
echo done`
	cmd := a.run(c.ID, bothy.RunRequest{Script: script, Secrets: []bothy.SecretRef{{Name: "gh", Env: "GH_TOKEN"}, {Name: "gh", Env: "GH_FILE", File: true}},
		Wait: true})
	if cmd.State != bothy.CommandCompleted || len(cmd.Secrets) != 2 || cmd.Secrets[0].Name != "gh" || !cmd.Secrets[1].File {
		t.Fatalf("command %s, secrets %+v", cmd.State, cmd.Secrets)
	}
	events := a.events(cmd.ID, 0, nil)
	out, errOut := output(events), stderr(events)
	sum := sha256.Sum256([]byte(secret))
	if !strings.Contains(out, "sha="+hex.EncodeToString(sum[:])) {
		t.Errorf("the command did not see the secret's value: %q", out)
	}
	if !strings.Contains(out, "exact:[REDACTED]") || !strings.Contains(out, "done") || errOut != "on stderr: [REDACTED]\n" ||
		strings.Count(out, "[REDACTED]") != 6 || !strings.Contains(out, "file:[REDACTED]") {
		t.Errorf("the command's output was not redacted as expected:\nstdout %q\nstderr %q", out, errOut)
	}
	forms := map[string]string{
		"exact": secret, "base64": base64.StdEncoding.EncodeToString([]byte(secret)),
		"hex": hex.EncodeToString([]byte(secret)), "url": url.QueryEscape(secret),
		"percent": strings.ToUpper(hex.EncodeToString([]byte(secret))), // checked as %XX below
	}
	check := func(where string, b []byte) {
		t.Helper()
		for name, f := range forms {
			if name == "percent" {
				continue
			}
			if strings.Contains(string(b), f) {
				t.Errorf("%s holds the secret (%s form)", where, name)
			}
		}
		var pct strings.Builder
		for _, c := range []byte(secret) {
			pct.WriteString("%" + strings.ToUpper(hex.EncodeToString([]byte{c})))
		}
		if strings.Contains(string(b), pct.String()) {
			t.Errorf("%s holds the secret (percent-encoded)", where)
		}
	}
	for _, e := range events {
		check("event "+e.Kind, append(append([]byte{}, e.Data...), e.Fields...))
	}
	scan := func(when string) int {
		t.Helper()
		n := 0
		filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() && path == filepath.Join(data, "secrets") {
				return filepath.SkipDir
			}
			if d.Type().IsRegular() {
				b, err := os.ReadFile(path)
				if err == nil {
					n++
					check(when+": "+strings.TrimPrefix(path, data), b)
				}
			}
			return nil
		})
		return n
	}
	if n := scan("while running"); n < 5 {
		t.Fatalf("scanned only %d files", n)
	}
	if cmd.OutputDigest == "" {
		t.Error("no output archive")
	}

	// The credentials of the host are out of reach.
	probe := a.run(c.ID, bothy.RunRequest{Script: `for f in /proc/[0-9]*/environ; do tr '\0' '\n' < $f; done 2>/dev/null | grep -c -e blc_ -e bat_ -e bothy_ -e BOTHY_SUPERVISOR_TOKEN
env | grep -ci token
cat ` + filepath.Join(data, "receipt.key") + ` ` + filepath.Join(data, "admin.token") + ` 2>&1 | grep -c "No such file"
ls /proc/1/root/ 2>&1 | head -1`, Wait: true})
	lines := strings.Split(output(a.events(probe.ID, 0, nil)), "\n")
	if len(lines) < 3 || lines[0] != "0" || lines[1] != "0" || lines[2] != "2" {
		t.Errorf("a credential is within a command's reach (want 0 environments with one, 0 token variables, 2 key files not found): %q", lines)
	}
	for _, f := range []string{"receipt.key", "admin.token"} {
		if _, err := os.Stat(filepath.Join(data, f)); err != nil {
			t.Errorf("the host's %s, which the probe could not read, does not exist either: %v", f, err)
		}
	}

	// The revision holds no trace of it either.
	if m := a.grep(c.ID, bothy.GrepOptions{Pattern: "s3cr3t"}).Matches; len(m) != 0 {
		t.Errorf("the workspace holds the secret: %+v", m)
	}
	a.stop(c.ID)
	scan("after stop")
	destroyAll(t, a, data)
	s.stop(t)
}

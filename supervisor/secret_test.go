package supervisor_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/providertest"
	"github.com/bothyhq/bothy/redact"
	"github.com/bothyhq/bothy/supervisor"
)

// testSecret has characters that every encoding treats differently.
const testSecret = "sk-Live_7f3a9c2e41d8b6/+=&x~Q"

// leaks returns the forms of testSecret that must appear nowhere, with
// fragments of it, so that an escaped form (JSON writes "&" as "\u0026")
// is caught too.
func leaks() []string {
	v := []byte(testSecret)
	return []string{testSecret, base64.StdEncoding.EncodeToString(v), base64.RawURLEncoding.EncodeToString(v), hex.EncodeToString(v), url.QueryEscape(testSecret),
		testSecret[3:22], base64.StdEncoding.EncodeToString(v[:24]), hex.EncodeToString(v[:12])}
}

// wantNoSecretFiles reads every file under dir and fails if one holds a
// form of testSecret.
func wantNoSecretFiles(t *testing.T, dir string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		for _, form := range leaks() {
			if bytes.Contains(b, []byte(form)) {
				t.Errorf("%s holds the secret as %q", path, form)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Fatalf("only %d files under %s", n, dir)
	}
}

// streams returns a command's stdout and stderr from its events, and
// fails unless it exited 0.
func streams(t *testing.T, evs []*bothy.Event) (string, string) {
	t.Helper()
	var out, errs strings.Builder
	for _, e := range evs {
		switch e.Kind {
		case bothy.EventStdout:
			out.Write(e.Data)
		case bothy.EventStderr:
			errs.Write(e.Data)
		}
	}
	if x := exitOf(t, evs[len(evs)-1]); x.ExitCode != 0 {
		t.Fatalf("exit %+v; stderr %q", x, errs.String())
	}
	return out.String(), errs.String()
}

func TestRun_SecretNeverOnDisk(t *testing.T) {
	t.Parallel()
	l := newLease(t)
	_, c := l.spawn(t)
	script := `printf '%s' "$API_KEY" | sha256sum | cut -c1-64; echo "len=${#API_KEY} plain=$PLAIN mark=${BOTHY_LEASE_MARK:+set} token=${BOTHY_SUPERVISOR_TOKEN:-none}"`
	run(t, c, "sec", bothy.RunSpec{Script: script, Env: map[string]string{"PLAIN": "visible"}, Secrets: map[string]string{"API_KEY": testSecret}})
	out, _ := streams(t, events(t, c, "sec", 0))
	sum := sha256.Sum256([]byte(testSecret))
	want := hex.EncodeToString(sum[:]) + "\n" + "len=29 plain=visible mark=set token=none\n"
	if out != want {
		t.Fatalf("the command saw:\n%s\nwant:\n%s", out, want)
	}
	wantNoSecretFiles(t, l.sup)
	// The accept record is the command without its secrets.
	b, err := os.ReadFile(filepath.Join(l.sup, "commands", "sec.journal"))
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	n := binary.LittleEndian.Uint32(b)
	if err := json.Unmarshal(b[8+17:8+n], &spec); err != nil {
		t.Fatalf("accept record: %v", err)
	}
	if _, ok := spec["secrets"]; ok || spec["script"] != script {
		t.Fatalf("accept record %v", spec)
	}
}

func TestRun_SecretRedacted(t *testing.T) {
	t.Parallel()
	l := newLease(t)
	_, c := l.spawn(t)
	// The secret exactly, in base64 alone and inside a longer base64
	// stream, URL-encoded, and split across two writes 100 ms apart.
	script := `printf '%s\n' "$S"
printf '%s' "$S" | base64 -w0; echo
printf 'xy%s' "$S" | base64 -w0; echo
u=; for ((i=0; i<${#S}; i++)); do ch=${S:i:1}; case $ch in [a-zA-Z0-9._~-]) u+=$ch;; *) printf -v h '%%%02X' "'$ch"; u+=$h;; esac; done; echo "$u"
printf '%s' "${S:0:3}"; sleep 0.1; printf '%s\n' "${S:3}"
echo "$S" >&2
echo done
printf 'end:%s' "${S:0:5}"`
	run(t, c, "red", bothy.RunSpec{Script: script, Secrets: map[string]string{"S": testSecret}})
	evs := events(t, c, "red", 0)
	out, errs := streams(t, evs)

	v := []byte(testSecret)
	raw := testSecret + "\n" + base64.StdEncoding.EncodeToString(v) + "\n" +
		base64.StdEncoding.EncodeToString([]byte("xy"+testSecret)) + "\n" +
		url.QueryEscape(testSecret) + "\n" + testSecret + "\n" + "done\n" + "end:" + testSecret[:5]
	r, err := redact.New([][]byte{v})
	if err != nil {
		t.Fatal(err)
	}
	want := string(r.Bytes([]byte(raw)))
	if out != want || strings.Count(out, redact.Marker) != 5 || !strings.HasPrefix(out, "[REDACTED]\n[REDACTED]\n") || !strings.HasSuffix(out, "[REDACTED]\n[REDACTED]\ndone\nend:sk-Li") {
		t.Fatalf("stdout:\n%s\nwant:\n%s", out, want)
	}
	if errs != "[REDACTED]\n" {
		t.Fatalf("stderr %q", errs)
	}
	// The archive holds the same redacted output.
	arch, err := os.ReadFile(supervisor.ArchivePath(l.sup, "red"))
	if err != nil {
		t.Fatal(err)
	}
	var archOut strings.Builder
	for len(arch) >= 5 {
		n := binary.LittleEndian.Uint32(arch[1:5])
		if arch[0] == 1 {
			archOut.Write(arch[5 : 5+n])
		}
		arch = arch[5+n:]
	}
	if archOut.String() != want {
		t.Fatalf("archive stdout:\n%s", archOut.String())
	}
	wantNoSecretFiles(t, l.sup)
}

func TestRun_SecretErrInvalid(t *testing.T) {
	t.Parallel()
	l := newLease(t)
	_, c := l.spawn(t)
	ctx := context.Background()
	for name, spec := range map[string]bothy.RunSpec{
		"in env and secrets": {Argv: []string{"true"}, Env: map[string]string{"K": "v"}, Secrets: map[string]string{"K": "long-value"}},
		"too short":          {Argv: []string{"true"}, Secrets: map[string]string{"K": "abc"}},
		"not utf-8":          {Argv: []string{"true"}, Secrets: map[string]string{"K": "abc\xff\xfe"}},
		"bad name":           {Argv: []string{"true"}, Secrets: map[string]string{"1K": "long-value"}},
		"nul":                {Argv: []string{"true"}, Secrets: map[string]string{"K": "long\x00value"}},
	} {
		id := "bad-" + strings.ReplaceAll(name, " ", "-")
		// The error names the variable, never the value nor a part of it
		// (every value here starts with "long").
		if _, err := c.Run(ctx, id, spec); bothy.ErrorCode(err) != bothy.EINVALID || strings.Contains(err.Error(), "long") {
			t.Errorf("%s: %v, want EINVALID", name, err)
		}
		if st := status(t, c, id); st.State != bothy.RunNeverSeen {
			t.Errorf("%s: refused run left %+v", name, st)
		}
	}
	// An empty secret is allowed: there is nothing to redact.
	run(t, c, "empty", bothy.RunSpec{Script: `echo "[${E-unset}]"`, Secrets: map[string]string{"E": ""}})
	if out, _ := streams(t, events(t, c, "empty", 0)); out != "[]\n" {
		t.Fatalf("empty secret: %q", out)
	}
}

// TestRun_ServerValidates: the supervisor validates a run itself (the
// client's own check is not all that stands in the way): a run request
// written straight to its socket with a spec the client would refuse is
// refused with EINVALID and starts nothing.
func TestRun_ServerValidates(t *testing.T) {
	t.Parallel()
	l := newLease(t)
	_, c := l.spawn(t)
	for name, spec := range map[string]bothy.RunSpec{
		"in env and secrets": {Argv: []string{"true"}, Env: map[string]string{"K": "v"}, Secrets: map[string]string{"K": "long-value"}},
		"bad name":           {Argv: []string{"true"}, Secrets: map[string]string{"1K": "long-value"}},
		"no program":         {},
		"nul in argv":        {Argv: []string{"tr\x00ue"}},
	} {
		id := "raw-" + strings.ReplaceAll(name, " ", "-")
		conn, err := net.Dial("unix", supervisor.SocketPath(l.sup))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(&supervisor.Request{Op: supervisor.OpRun, CommandID: id, RunSpec: spec})
		if _, err := conn.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(conn).ReadBytes('\n')
		conn.Close()
		if err != nil {
			t.Fatalf("%s: read answer: %v", name, err)
		}
		var resp supervisor.Response
		if err := json.Unmarshal(line, &resp); err != nil {
			t.Fatalf("%s: %v: %s", name, err, line)
		}
		if resp.Error == nil || resp.Error.Code != bothy.EINVALID || strings.Contains(resp.Error.Message, "long") {
			t.Errorf("%s: answer %s, want EINVALID naming no value", name, line)
		}
		if st := status(t, c, id); st.State != bothy.RunNeverSeen {
			t.Errorf("%s: refused run left %+v", name, st)
		}
	}
}

// TestSupervisorKilled_LegacyToken checks that a supervisor kills the
// processes that an older supervisor tagged with its token, and removes
// the token.
func TestSupervisorKilled_LegacyToken(t *testing.T) {
	t.Parallel()
	l := newLease(t)
	const token = "0123456789abcdef0123456789abcdef"
	if err := os.WriteFile(filepath.Join(l.sup, "token"), []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	marker := providertest.Marker()
	left := exec.Command("sleep", marker)
	left.Env = []string{"BOTHY_SUPERVISOR_TOKEN=" + token}
	left.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { left.Wait(); close(done) }()
	t.Cleanup(func() { left.Process.Kill(); <-done })
	l.spawn(t)
	select {
	case <-done: // reaped here: the supervisor is not its parent
	case <-time.After(5 * time.Second):
		t.Fatal("the process tagged with the legacy token survived the supervisor's start")
	}
	providertest.WantNoProcess(t, marker)
	if _, err := os.Stat(filepath.Join(l.sup, "token")); !os.IsNotExist(err) {
		t.Fatalf("the legacy token is still there: %v", err)
	}
}

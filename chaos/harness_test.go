package chaos_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	nethttp "net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/testenv"
)

// long multiplies the trials: `go test ./chaos/ -long`.
var long = flag.Bool("long", false, "run more trials of each kind")

// trials returns how many trials of a kind to run: n, or 5n with -long.
func trials(n int) int {
	if *long {
		return 5 * n
	}
	return n
}

// terminalWithin is how long a command may take to reach a terminal state
// once the fault is over and serve answers again. It is well under the
// lease TTL (60 s), so a command that waits for the reaper fails the trial.
const terminalWithin = 40 * time.Second

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// bothyBin builds bin/bothy and bin/bothy-supervisor once, together and with
// one build stamp as scripts/build does, so that serve runs this build's
// supervisor; under -race they are built with the race detector too.
func bothyBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "bothy-chaos-bin-")
		if buildErr != nil {
			return
		}
		stamp := fmt.Sprintf("chaos-%d-%d", time.Now().UnixNano(), os.Getpid())
		args := []string{"build", "-ldflags", "-X github.com/bothyhq/bothy/supervisor.BuildStamp=" + stamp, "-o", binDir + "/"}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, "../cmd/bothy", "../cmd/bothy-supervisor")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "bothy")
}

// needSandbox ends the test unless it may run real sandboxes.
func needSandbox(t *testing.T) {
	t.Helper()
	testenv.Short(t, "the chaos suite starts bothy serve and real sandboxes")
	testenv.Root(t, "the chaos suite needs root (bubblewrap, cgroups, overlayfs)")
	testenv.Program(t, "bwrap")
}

// node is `bothy serve` on one data directory, across restarts.
type node struct {
	t    *testing.T
	bin  string
	data string
	args []string
	// log is serve's stderr, every run of it.
	log testenv.Buffer
	// leases records what the lease records under data named while the
	// trial ran (checkNoResidue looks for each afterwards).
	leases map[string][]string
	// mounts are the test's own mounts under data, which are no residue.
	mounts []string

	mu    sync.Mutex
	url   string
	token string
	cmd   *exec.Cmd
	done  chan struct{}
}

// newNode starts serve on data with extra args. At the end of the test it
// kills serve if it runs and, if the test failed, stops whatever data's
// leases left and logs serve's stderr.
func newNode(t *testing.T, data string, args ...string) *node {
	t.Helper()
	return newNodeMounts(t, data, nil, args...)
}

// newNodeMounts is newNode on a data directory under which the test
// mounted mounts.
func newNodeMounts(t *testing.T, data string, mounts []string, args ...string) *node {
	t.Helper()
	n := &node{t: t, bin: bothyBin(t), data: data, args: args, leases: map[string][]string{}, mounts: mounts}
	t.Cleanup(func() {
		n.kill9()
		if t.Failed() {
			if k := removeResidue(data, n.leases, n.mounts); k > 0 {
				t.Logf("the failed trial left %d things under %s; stopped them", k, data)
			}
			t.Logf("bothy serve stderr:\n%s", n.log.String())
		}
	})
	n.start()
	return n
}

// start starts serve and waits until it prints its address.
func (n *node) start() {
	t := n.t
	t.Helper()
	cmd := exec.Command(n.bin, append([]string{"serve", "--data", n.data, "--listen", "127.0.0.1:0"}, n.args...)...)
	fmt.Fprintf(&n.log, "--- bothy serve %s\n", time.Now().Format(time.RFC3339Nano))
	cmd.Stderr = &n.log
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			first <- sc.Text()
		}
		close(first)
		io.Copy(io.Discard, out)
		cmd.Wait()
		close(done)
	}()
	var line string
	select {
	case line = <-first:
	case <-time.After(60 * time.Second):
	}
	url, ok := strings.CutPrefix(line, "export BOTHY_URL=")
	if !ok {
		cmd.Process.Kill()
		<-done
		t.Fatalf("bothy serve printed %q, want export BOTHY_URL=…; stderr:\n%s", line, n.log.String())
	}
	tok, err := os.ReadFile(filepath.Join(n.data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	n.url, n.token, n.cmd, n.done = url, strings.TrimSpace(string(tok)), cmd, done
	n.mu.Unlock()
}

// running returns serve's process and its exit channel, nil if none.
func (n *node) running() (*exec.Cmd, chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd, n.done
}

// kill9 kills serve with SIGKILL, as a crash, and waits for it.
func (n *node) kill9() {
	cmd, done := n.running()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// term sends serve SIGTERM and waits for it to exit; it fails the test if
// serve exits with an error or not within a minute.
func (n *node) term() {
	t := n.t
	t.Helper()
	cmd, done := n.running()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		if !cmd.ProcessState.Success() {
			t.Errorf("bothy serve exited with %v after SIGTERM", cmd.ProcessState)
		}
	case <-time.After(time.Minute):
		t.Errorf("bothy serve did not exit within a minute of SIGTERM")
		n.kill9()
	}
}

// restart starts serve again after it died.
func (n *node) restart() {
	n.t.Helper()
	_, done := n.running()
	if done != nil {
		<-done
	}
	n.start()
}

func (n *node) endpoint() (string, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.url, n.token
}

// apiError is a non-2xx answer of the API.
type apiError struct {
	Status int
	Body   string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s", e.Status, e.Body) }

// status returns the HTTP status of an API error, 0 for another error.
func status(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

var client = &nethttp.Client{Timeout: 2 * time.Minute}

// do sends a JSON request to serve and decodes a 2xx answer into out.
func (n *node) do(method, path string, in, out any) error {
	url, token := n.endpoint()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := nethttp.NewRequest(method, url+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &apiError{resp.StatusCode, strings.TrimSpace(string(b))}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// must is do that fails the test on an error.
func (n *node) must(method, path string, in, out any) {
	n.t.Helper()
	if err := n.do(method, path, in, out); err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
}

func (n *node) create(label string) string {
	n.t.Helper()
	var c bothy.Computer
	n.must("POST", "/v1/computers", map[string]any{"label": label}, &c)
	return c.ID
}

// work is a command of a trial: it appends its token to side.log in the
// workspace (its side effect, which must happen once), then prints lines
// line 1 … line N, pausing between them.
type work struct {
	computer string
	token    string
	lines    int
	cmd      bothy.Command
	events   *stream
}

func newWork(computer string, lines int) *work {
	return &work{computer: computer, token: fmt.Sprintf("tok-%016x", rand.Uint64()), lines: lines}
}

func (w *work) request() map[string]any {
	script := fmt.Sprintf("echo %s >> side.log; for i in $(seq 1 %d); do echo line $i; sleep 0.05; done", w.token, w.lines)
	return map[string]any{"script": script, "idempotency_key": w.token}
}

// wantOutput is what w prints.
func (w *work) wantOutput() string {
	var b strings.Builder
	for i := 1; i <= w.lines; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// post sends w's run request once.
func (n *node) post(w *work) error {
	return n.do("POST", "/v1/computers/"+w.computer+"/commands", w.request(), &w.cmd)
}

// submit sends w's run request until the server answers it (the same
// idempotency key, so a retry never runs it twice), then follows its events.
func (n *node) submit(w *work) {
	n.t.Helper()
	deadline := time.Now().Add(terminalWithin)
	for {
		err := n.post(w)
		if err == nil {
			break
		} else if time.Now().After(deadline) {
			n.t.Fatalf("run on %s: %v", w.computer, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if w.events == nil {
		w.events = n.follow(w.cmd.ID)
	}
}

// command gets a command.
func (n *node) command(id string) bothy.Command {
	n.t.Helper()
	var c bothy.Command
	n.must("GET", "/v1/commands/"+id, nil, &c)
	return c
}

// waitTerminal waits until command id is in a terminal state, within d.
func (n *node) waitTerminal(id string, d time.Duration) bothy.Command {
	n.t.Helper()
	c, err := n.awaitTerminal(id, d)
	if err != nil {
		n.t.Fatal(err)
	}
	return c
}

// awaitTerminal is waitTerminal that returns an error rather than end the
// test.
func (n *node) awaitTerminal(id string, d time.Duration) (bothy.Command, error) {
	deadline := time.Now().Add(d)
	for {
		var c bothy.Command
		err := n.do("GET", "/v1/commands/"+id, nil, &c)
		if err == nil && bothy.CommandTerminal(c.State) {
			return c, nil
		} else if time.Now().After(deadline) {
			return c, fmt.Errorf("command %s not in a terminal state after %v: %s %v", id, d, c.State, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runOK runs a command on computer and checks that it completes with its
// whole output and side effect.
func (n *node) runOK(computer string, lines int) *work {
	n.t.Helper()
	w := newWork(computer, lines)
	n.submit(w)
	n.checkCompleted(w)
	return w
}

// checkCompleted waits for w to end and checks that it completed with exit 0
// and that its stream held every event once, in order, with its output.
func (n *node) checkCompleted(w *work) {
	n.t.Helper()
	c := n.waitTerminal(w.cmd.ID, terminalWithin)
	n.observe()
	if c.State != bothy.CommandCompleted || c.ExitCode == nil || *c.ExitCode != 0 {
		n.t.Errorf("command %s on %s ended %s exit %v error %q, want completed with 0", c.ID, w.computer, c.State, c.ExitCode, c.Error)
		return
	}
	out := w.events.check(n.t, c, terminalWithin)
	if out != w.wantOutput() {
		n.t.Errorf("command %s printed %q, want %q", c.ID, out, w.wantOutput())
	}
}

// readFile reads a workspace file of computer.
func (n *node) readFile(computer, path string) (string, error) {
	url, token := n.endpoint()
	req, err := nethttp.NewRequest("GET", url+"/v1/computers/"+computer+"/files/"+path, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", &apiError{resp.StatusCode, string(b)}
	}
	return string(b), err
}

// checkOnce checks that each of works' tokens is in its computer's side.log
// exactly once, and at most once for those in maybe (commands that were
// lost or killed, which may or may not have got that far).
func (n *node) checkOnce(works []*work, maybe ...*work) {
	n.t.Helper()
	logs := map[string]string{}
	for _, w := range append(append([]*work(nil), works...), maybe...) {
		if _, ok := logs[w.computer]; ok {
			continue
		}
		s, err := n.readFile(w.computer, "side.log")
		if err != nil {
			n.t.Errorf("read side.log of %s: %v", w.computer, err)
		}
		logs[w.computer] = s
	}
	for _, w := range works {
		if k := strings.Count(logs[w.computer], w.token+"\n"); k != 1 {
			n.t.Errorf("the side effect of %s (%s) happened %d times, want once", w.cmd.ID, w.token, k)
		}
	}
	for _, w := range maybe {
		if k := strings.Count(logs[w.computer], w.token+"\n"); k > 1 {
			n.t.Errorf("the side effect of %s (%s) happened %d times, want at most once", w.cmd.ID, w.token, k)
		}
	}
}

// finish ends a trial: it destroys every computer, stops serve with
// SIGTERM, and checks serve's log and that nothing of data is left.
func (n *node) finish() {
	t := n.t
	t.Helper()
	n.observe()
	var list struct{ Computers []bothy.Computer }
	n.must("GET", "/v1/computers?limit=1000", nil, &list)
	for _, c := range list.Computers {
		if c.State != bothy.StateDestroyed {
			if err := n.do("DELETE", "/v1/computers/"+c.ID, nil, nil); err != nil {
				t.Errorf("destroy %s: %v", c.ID, err)
			}
		}
	}
	n.term()
	checkLog(t, n.log.String())
	checkNoResidue(t, n.data, n.leases, n.mounts)
}

// checkLog fails on a panic, a goroutine dump or a data race in serve's
// stderr.
func checkLog(t *testing.T, log string) {
	t.Helper()
	for _, bad := range []string{"panic:", "goroutine ", "WARNING: DATA RACE", "fatal error:"} {
		if i := strings.Index(log, bad); i >= 0 {
			t.Errorf("bothy serve's stderr holds %q:\n%s", bad, log[max(0, i-200):min(len(log), i+2000)])
		}
	}
}

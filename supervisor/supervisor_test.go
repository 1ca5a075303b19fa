package supervisor_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/process"
	"github.com/bothyhq/bothy/providertest"
	"github.com/bothyhq/bothy/supervisor"
)

const modeEnv = "BOTHY_SUPERVISOR_TEST"

// TestMain re-execs the test binary as a supervisor (modeEnv=supervisor,
// as `bothy supervisor` would run) or as an agent that spawns one and
// then waits to be killed (modeEnv=agent).
func TestMain(m *testing.M) {
	switch os.Getenv(modeEnv) {
	case "supervisor":
		os.Exit(supervisor.Main(os.Args[1:], process.New()))
	case "agent":
		os.Setenv(modeEnv, "supervisor")
		pid, socket, err := supervisor.Spawn(context.Background(), os.Args[0], nil, os.Getenv("SUPERVISOR_DIR"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("%d %s\n", pid, socket)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Setenv(modeEnv, "supervisor")
	os.Exit(m.Run())
}

type lease struct {
	dir, ws, sup string
}

// newLease starts a process-provider lease and prepares its supervisor
// directory.
func newLease(t *testing.T) *lease {
	t.Helper()
	dir := t.TempDir()
	l := &lease{dir: dir, ws: filepath.Join(dir, "ws"), sup: filepath.Join(dir, "sup")}
	if err := os.Mkdir(l.ws, 0o700); err != nil {
		t.Fatal(err)
	}
	h, err := process.New().Start(context.Background(), bothy.LeaseSpec{LeaseID: "lease1", ComputerID: "comp1", Generation: 1, Workspace: l.ws})
	if err != nil {
		t.Fatal(err)
	}
	if err := supervisor.Init(l.sup, h); err != nil {
		t.Fatal(err)
	}
	return l
}

// spawn starts the lease's supervisor, detached, and stops it at cleanup.
func (l *lease) spawn(t *testing.T) (int, *supervisor.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pid, socket, err := supervisor.Spawn(ctx, os.Args[0], nil, l.sup)
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(l.sup, supervisor.LogFile))
		t.Fatalf("%v; its log:\n%s", err, log)
	}
	t.Cleanup(func() { stopSupervisor(pid, socket) })
	return pid, dial(t, socket)
}

func dial(t *testing.T, socket string) *supervisor.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := supervisor.Dial(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stopSupervisor asks the supervisor to shut down, and kills it if it is
// still there after a few seconds.
func stopSupervisor(pid int, socket string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := supervisor.Dial(ctx, socket); err == nil {
		c.Shutdown(ctx)
		c.Close()
	}
	for range 500 {
		if syscall.Kill(pid, 0) != nil || isZombie(pid) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

func run(t *testing.T, c *supervisor.Client, id string, spec bothy.RunSpec) *supervisor.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Run(ctx, id, spec)
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	return st
}

func status(t *testing.T, c *supervisor.Client, id string) *supervisor.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Status(ctx, id)
	if err != nil {
		t.Fatalf("status %s: %v", id, err)
	}
	return st
}

// events reads a command's events after seq after until the terminal one.
func events(t *testing.T, c *supervisor.Client, id string, after int64) []*bothy.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := c.Events(ctx, id, after)
	if err != nil {
		t.Fatalf("events %s: %v", id, err)
	}
	defer s.Close()
	var out []*bothy.Event
	for range 1_000_000 {
		e, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("events %s after %d: %v", id, after, err)
		}
		out = append(out, e)
	}
	t.Fatal("too many events")
	return nil
}

// wantSeqs checks that events count after+1, after+2, … and that only the
// last is terminal, and returns their stdout.
func wantSeqs(t *testing.T, evs []*bothy.Event, after int64) string {
	t.Helper()
	var out strings.Builder
	for i, e := range evs {
		if e.Seq != after+int64(i)+1 {
			t.Fatalf("event %d has seq %d, want %d", i, e.Seq, after+int64(i)+1)
		}
		if term := e.Kind == bothy.EventExit || e.Kind == bothy.EventState; term != (i == len(evs)-1) {
			t.Fatalf("event seq %d kind %s: terminal=%v at index %d of %d", e.Seq, e.Kind, term, i, len(evs))
		}
		if e.Kind == bothy.EventStdout {
			out.Write(e.Data)
		}
	}
	return out.String()
}

func exitOf(t *testing.T, e *bothy.Event) bothy.Exit {
	t.Helper()
	if e.Kind != bothy.EventExit {
		t.Fatalf("last event is %s %s, want exit", e.Kind, e.Fields)
	}
	var x bothy.Exit
	if err := json.Unmarshal([]byte(e.Fields), &x); err != nil {
		t.Fatal(err)
	}
	return x
}

func TestRun_Echo(t *testing.T) {
	t.Parallel()
	l := newLease(t)
	_, c := l.spawn(t)
	st := run(t, c, "cmd1", bothy.RunSpec{Script: "echo one; echo two >&2; echo three; exit 3"})
	if st.State != bothy.RunRunning && st.State != bothy.RunFinished {
		t.Fatalf("state %s", st.State)
	}
	evs := events(t, c, "cmd1", 0)
	if out := wantSeqs(t, evs, 0); out != "one\nthree\n" {
		t.Fatalf("stdout %q", out)
	}
	if x := exitOf(t, evs[len(evs)-1]); x.ExitCode != 3 {
		t.Fatalf("exit %+v", x)
	}
	// Resuming after any seq yields exactly the rest.
	if rest := events(t, c, "cmd1", 2); len(rest) != len(evs)-2 || rest[0].Seq != 3 {
		t.Fatalf("after 2: %d events", len(rest))
	}
	ctx := context.Background()
	if err := c.Ack(ctx, "cmd1", 2); err != nil {
		t.Fatal(err)
	}
	if st := status(t, c, "cmd1"); st.State != bothy.RunFinished || st.AckedSeq != 2 || st.LastSeq != int64(len(evs)) {
		t.Fatalf("status %+v", st)
	}
	if st := status(t, c, "nobody"); st.State != bothy.RunNeverSeen {
		t.Fatalf("unknown id: %s", st.State)
	}
	if _, err := c.Events(ctx, "nobody", 0); bothy.ErrorCode(err) != bothy.ENOTFOUND {
		t.Fatalf("events of unknown id: %v", err)
	}
}

func TestRun_Idempotent(t *testing.T) {
	t.Parallel()
	l := newLease(t)
	_, c := l.spawn(t)
	spec := bothy.RunSpec{Script: "echo ran >> counter; sleep 0.3; echo done"}
	if st := run(t, c, "once", spec); st.Existing {
		t.Fatal("first run is existing")
	}
	if st := run(t, c, "once", spec); !st.Existing || st.State != bothy.RunRunning {
		t.Fatalf("second run while running: %+v", st)
	}
	events(t, c, "once", 0)
	if st := run(t, c, "once", spec); !st.Existing || st.State != bothy.RunFinished {
		t.Fatalf("third run after exit: %+v", st)
	}
	time.Sleep(100 * time.Millisecond)
	if b, _ := os.ReadFile(filepath.Join(l.ws, "counter")); string(b) != "ran\n" {
		t.Fatalf("counter %q, want one run", b)
	}
}

// ticker prints 50 lines 100 ms apart: a 5 s command.
var ticker = bothy.RunSpec{Script: "for i in $(seq 1 50); do echo line $i; sleep 0.1; done"}

func wantTicker(t *testing.T, out string) {
	t.Helper()
	var want strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if out != want.String() {
		t.Fatalf("output is not the 50 lines in order:\n%s", out)
	}
}

// readSome reads events until one with seq at least n, then closes the
// client mid-stream, and returns what it read.
func readSome(t *testing.T, c *supervisor.Client, id string, n int64) []*bothy.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.Events(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []*bothy.Event
	for len(got) == 0 || got[len(got)-1].Seq < n {
		e, err := s.Next()
		if err != nil {
			t.Fatalf("read %d events: %v", len(got), err)
		}
		got = append(got, e)
	}
	c.Close()
	if _, err := s.Next(); err == nil {
		t.Fatal("stream still readable after the client closed")
	}
	return got
}

func TestReattach_ClientClosed(t *testing.T) {
	t.Parallel()
	l := newLease(t)
	_, c := l.spawn(t)
	run(t, c, "tick", ticker)
	first := readSome(t, c, "tick", 10)
	c2 := dial(t, supervisor.SocketPath(l.sup))
	last := first[len(first)-1].Seq
	rest := events(t, c2, "tick", last)
	all := append(first, rest...)
	wantTicker(t, wantSeqs(t, all, 0))
	if x := exitOf(t, all[len(all)-1]); x.ExitCode != 0 {
		t.Fatalf("exit %+v", x)
	}
}

func TestReattach_AgentKilled(t *testing.T) {
	t.Parallel()
	l := newLease(t)
	agent := exec.Command(os.Args[0])
	agent.Env = append(os.Environ(), modeEnv+"=agent", "SUPERVISOR_DIR="+l.sup)
	agent.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	agent.Stderr = os.Stderr
	stdout, err := agent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-agent.Process.Pid, syscall.SIGKILL); agent.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	var pid int
	var socket string
	if _, err := fmt.Sscanf(line, "%d %s", &pid, &socket); err != nil {
		t.Fatalf("agent said %q", line)
	}
	t.Cleanup(func() { stopSupervisor(pid, socket) })

	c := dial(t, socket)
	run(t, c, "tick", ticker)
	first := readSome(t, c, "tick", 10)
	// The agent and its whole process group die; the supervisor, in its
	// own session, does not.
	if err := syscall.Kill(-agent.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	agent.Wait()
	time.Sleep(200 * time.Millisecond)
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("supervisor died with the agent: %v", err)
	}
	c2 := dial(t, socket)
	if st := status(t, c2, "tick"); st.State != bothy.RunRunning {
		t.Fatalf("after the agent died: %+v", st)
	}
	rest := events(t, c2, "tick", first[len(first)-1].Seq)
	all := append(first, rest...)
	wantTicker(t, wantSeqs(t, all, 0))
}

func TestSupervisorKilled(t *testing.T) {
	t.Parallel()
	l := newLease(t)
	pid, c := l.spawn(t)
	run(t, c, "done", bothy.RunSpec{Argv: []string{"echo", "finished"}})
	doneEvs := events(t, c, "done", 0)
	marker := providertest.Marker()
	long := bothy.RunSpec{Script: "echo ran >> counter; echo started; sleep " + marker}
	run(t, c, "long", long)
	if evs := readSome(t, c, "long", 1); string(evs[0].Data) != "started\n" {
		t.Fatalf("first event %+v", evs[0])
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := 0; syscall.Kill(pid, 0) == nil && !isZombie(pid); i++ {
		if i > 500 {
			t.Fatal("supervisor survived SIGKILL")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A torn tail on both journals: a half-written record after the last
	// good one, as a crash mid-write leaves.
	for _, id := range []string{"done", "long"} {
		f, err := os.OpenFile(filepath.Join(l.sup, "commands", id+".journal"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte{40, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7})
		f.Close()
	}

	_, c2 := l.spawn(t)
	providertest.WantNoProcess(t, marker)
	if got := events(t, c2, "done", 0); len(got) != len(doneEvs) || wantSeqs(t, got, 0) != "finished\n" {
		t.Fatalf("finished command after restart: %d events, want %d", len(got), len(doneEvs))
	}
	if st := status(t, c2, "done"); st.State != bothy.RunFinished || st.Exit == nil || st.Exit.ExitCode != 0 {
		t.Fatalf("finished command after restart: %+v", st)
	}
	st := status(t, c2, "long")
	if st.State != bothy.RunLost || st.LastSeq != 2 {
		t.Fatalf("interrupted command after restart: %+v", st)
	}
	evs := events(t, c2, "long", 0)
	if out := wantSeqs(t, evs, 0); out != "started\n" || !strings.Contains(evs[1].Fields, `"state":"lost"`) {
		t.Fatalf("interrupted command's events: %q then %s", out, evs[len(evs)-1].Fields)
	}
	if st := run(t, c2, "long", long); !st.Existing || st.State != bothy.RunLost {
		t.Fatalf("rerun of a lost command: %+v", st)
	}
	time.Sleep(200 * time.Millisecond)
	if b, _ := os.ReadFile(filepath.Join(l.ws, "counter")); string(b) != "ran\n" {
		t.Fatalf("counter %q: the lost command ran again", b)
	}
}

func TestCancel_KillsTree(t *testing.T) {
	t.Parallel()
	l := newLease(t)
	_, c := l.spawn(t)
	marker := providertest.Marker()
	script := fmt.Sprintf("bash -c 'sleep %s & sleep %s; wait' & sleep %s & echo ready; wait", marker, marker, marker)
	run(t, c, "tree", bothy.RunSpec{Script: script})
	readSome(t, c, "tree", 1)
	for i := 0; len(providertest.Processes(marker)) < 4; i++ {
		if i > 500 {
			t.Fatalf("the tree never started: %v", providertest.Processes(marker))
		}
		time.Sleep(10 * time.Millisecond)
	}
	c2 := dial(t, supervisor.SocketPath(l.sup))
	if _, err := c2.Cancel(context.Background(), "tree"); err != nil {
		t.Fatal(err)
	}
	evs := events(t, c2, "tree", 0)
	wantSeqs(t, evs, 0)
	if x := exitOf(t, evs[len(evs)-1]); !x.Cancelled {
		t.Fatalf("exit %+v", x)
	}
	providertest.WantNoProcess(t, marker)
	if _, err := c2.Cancel(context.Background(), "nobody"); bothy.ErrorCode(err) != bothy.ENOTFOUND {
		t.Fatalf("cancel of unknown id: %v", err)
	}
}

func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

func TestSlowReader_BoundedMemory(t *testing.T) {
	t.Parallel()
	l := newLease(t)
	pid, c := l.spawn(t)
	const total = 50 << 20
	run(t, c, "big", bothy.RunSpec{Script: fmt.Sprintf("head -c %d /dev/zero", total)})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	s, err := c.Events(ctx, "big", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var maxRSS, data int64
	var last, truncated *bothy.Event
	for i := 0; ; i++ {
		e, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if e.Seq != int64(i)+1 {
			t.Fatalf("seq %d at %d", e.Seq, i)
		}
		data += int64(len(e.Data))
		if e.Kind == bothy.EventTruncated {
			truncated = e
		}
		last = e
		if i < 150 { // slow: one record every 10 ms while the command writes
			time.Sleep(10 * time.Millisecond)
			if i%10 == 0 {
				maxRSS = max(maxRSS, vmRSS(t, pid))
			}
		}
	}
	maxRSS = max(maxRSS, vmRSS(t, pid))
	t.Logf("supervisor max VmRSS %d MiB", maxRSS>>20)
	if maxRSS > 100<<20 {
		t.Fatalf("supervisor RSS %d MiB", maxRSS>>20)
	}
	if truncated == nil || data != supervisor.DefaultRetainBytes {
		t.Fatalf("retained %d bytes, truncated event %v", data, truncated)
	}
	x := exitOf(t, last)
	if x.ExitCode != 0 || x.DroppedBytes != total-supervisor.DefaultRetainBytes {
		t.Fatalf("exit %+v", x)
	}
	if st := status(t, c, "big"); !st.Truncated {
		t.Fatalf("status %+v", st)
	}
}

// TestCancelDiskLimited: a command cancelled for the scratch limit ends
// with DiskLimited in its exit record, not Cancelled, so the end says why
// whoever reads the journal, an agent restarted meanwhile included.
func TestCancelDiskLimited(t *testing.T) {
	t.Parallel()
	l := newLease(t)
	_, c := l.spawn(t)
	run(t, c, "filler", bothy.RunSpec{Script: "echo writing; sleep 30"})
	readSome(t, c, "filler", 1)
	c2 := dial(t, supervisor.SocketPath(l.sup))
	if _, err := c2.CancelDiskLimited(context.Background(), "filler"); err != nil {
		t.Fatal(err)
	}
	evs := events(t, c2, "filler", 0)
	if x := exitOf(t, evs[len(evs)-1]); !x.DiskLimited || x.Cancelled {
		t.Fatalf("exit %+v, want disk_limited and not cancelled", x)
	}
}

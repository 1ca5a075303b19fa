package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
)

// markedProcesses lists the processes whose environment holds the marker.
func markedProcesses(mark string) []int {
	return processesMentioning("BOTHY_E2E_MARK=" + mark)
}

// waitProcesses polls until cond holds for the marked processes (bounded:
// 10 s) and returns them.
func waitProcesses(t *testing.T, mark string, cond func(n int) bool) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := markedProcesses(mark)
		if cond(len(pids)) {
			return pids
		} else if time.Now().After(deadline) {
			t.Fatalf("marked processes: %v", pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func randomMark() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// treeScript starts children and grandchildren that would run for minutes.
const treeScript = "bash -c 'sleep 300 & sleep 300 & wait' & sleep 300 & wait"

func TestE2E_Lifecycle(t *testing.T) {
	needSandbox(t)
	stores(t, func(t *testing.T, storeArgs []string) {
		data := t.TempDir()
		s := startServeWith(t, data, nil, storeArgs...)
		tok := serverToken(t, s, data)
		a := newAPI(t, s, tok)
		c := a.create("lifecycle")

		// A background process outlives its command: the next command in
		// the lease finds it running.
		a.run(c.ID, bothy.RunRequest{Script: "sleep 300 & echo $! > bg.pid", Wait: true})
		bg := a.run(c.ID, bothy.RunRequest{Script: "kill -0 $(cat bg.pid) && echo alive && id -un", Wait: true})
		if got := output(a.events(bg.ID, 0, nil)); got != "alive\nbothy\n" {
			t.Fatalf("background process: %q (%s)", got, bg.State)
		}

		// Reading an active computer's files sees its disk now: a file a
		// background process wrote after the last command ended.
		a.run(c.ID, bothy.RunRequest{Script: "(sleep 0.3; echo late > late.txt) &", Wait: true})
		time.Sleep(time.Second)
		if got := a.readFile(c.ID, "late.txt"); got != "late\n" {
			t.Fatalf("late.txt = %q", got)
		}
		// Writing to an active computer's files reaches its disk: the next
		// command sees the file, owned by the sandbox's user, and a
		// background process keeps running through it.
		a.writeFile(c.ID, "dir/x.txt", "from the API\n", bothy.WriteOptions{MkdirParents: true})
		a.mkdir(c.ID, "made/by/api", bothy.MkdirOptions{Parents: true})
		both := a.run(c.ID, bothy.RunRequest{Script: "echo more >> dir/x.txt && cat dir/x.txt && touch made/by/api/f && kill -0 $(cat bg.pid) && echo alive", Wait: true})
		if got := output(a.events(both.ID, 0, nil)); both.State != bothy.CommandCompleted || got != "from the API\nmore\nalive\n" {
			t.Fatalf("after API writes to an active computer: %s %q", both.State, got)
		}
		if got := a.readFile(c.ID, "dir/x.txt"); got != "from the API\nmore\n" {
			t.Fatalf("dir/x.txt = %q", got)
		}
		if rev := a.checkpoint(c.ID); rev.Number < 1 {
			t.Fatalf("checkpoint now: %+v", rev)
		}

		// Cancel and timeout kill the whole tree: children and grandchildren.
		mark := randomMark()
		cmd := a.run(c.ID, bothy.RunRequest{Script: treeScript, Env: map[string]string{"BOTHY_E2E_MARK": mark}})
		waitProcesses(t, mark, func(n int) bool { return n >= 4 })
		a.cancel(cmd.ID)
		if got := a.wait(cmd.ID); got.State != bothy.CommandCancelled {
			t.Fatalf("cancelled command is %s", got.State)
		}
		waitProcesses(t, mark, func(n int) bool { return n == 0 })

		mark = randomMark()
		cmd = a.run(c.ID, bothy.RunRequest{Script: treeScript, TimeoutMS: 1000, Env: map[string]string{"BOTHY_E2E_MARK": mark}})
		waitProcesses(t, mark, func(n int) bool { return n >= 4 })
		if got := a.wait(cmd.ID); got.State != bothy.CommandTimedOut {
			t.Fatalf("timed-out command is %s", got.State)
		}
		waitProcesses(t, mark, func(n int) bool { return n == 0 })

		// Paths are confined: a cwd that climbs out, an absolute path, and a
		// symlink that leads out of the workspace.
		if st, raw := a.call("POST", "/v1/computers/"+c.ID+"/commands", bothy.RunRequest{Argv: []string{"ls"}, Cwd: "../.."}, nil); st != 400 || !strings.Contains(string(raw), "invalid_path") {
			t.Errorf("cwd ../..: %d %s", st, raw)
		}
		a.run(c.ID, bothy.RunRequest{Script: "ln -s /etc etc-link && ln -s ../../../../etc/passwd up-link", Wait: true})
		for _, p := range []string{"etc-link/passwd", "up-link", "a/../../etc/passwd"} {
			if st, raw := a.call("GET", "/v1/computers/"+c.ID+"/files/"+p, nil, nil); st != 400 {
				t.Errorf("read %s: %d %s", p, st, raw)
			}
			if st, raw := a.call("PUT", "/v1/computers/"+c.ID+"/files/"+p, "x", nil); st != 400 {
				t.Errorf("write %s: %d %s", p, st, raw)
			}
		}
		// An absolute path names a path in the workspace, never the host's.
		if st, raw := a.call("GET", "/v1/computers/"+c.ID+"/files/%2Fetc%2Fpasswd", nil, nil); st != 404 && st != 400 {
			t.Errorf("read /etc/passwd: %d %s", st, raw)
		}

		// Tenancy and scopes: another tenant's token sees nothing of it; a
		// token without computers:write cannot run; an unknown profile is
		// refused.
		other := adminToken(t, data, storeArgs, "t2", "computers:read,computers:write,files:read")
		b := newAPI(t, s, other)
		for _, p := range []string{"/v1/computers/" + c.ID, "/v1/commands/" + cmd.ID, "/v1/commands/" + cmd.ID + "/events", "/v1/computers/" + c.ID + "/files/late.txt"} {
			if st, _ := b.call("GET", p, nil, nil); st != 404 {
				t.Errorf("another tenant GET %s: %d", p, st)
			}
		}
		if st, _ := b.call("POST", "/v1/computers/"+c.ID+"/commands", bothy.RunRequest{Argv: []string{"true"}}, nil); st != 404 {
			t.Errorf("another tenant runs a command: %d", st)
		}
		readOnly := newAPI(t, s, adminToken(t, data, storeArgs, "default", "computers:read"))
		if st, _ := readOnly.call("POST", "/v1/computers/"+c.ID+"/commands", bothy.RunRequest{Argv: []string{"true"}}, nil); st != 403 {
			t.Errorf("run without computers:write: %d", st)
		}
		if st, raw := a.call("POST", "/v1/computers", map[string]string{"profile": "gpu"}, nil); st != 400 {
			t.Errorf("unknown profile: %d %s", st, raw)
		}

		// Destroy tears everything down and records an empty residue.
		if dead := a.destroy(c.ID); dead.State != bothy.StateDestroyed {
			t.Fatalf("destroyed computer is %s", dead.State)
		}
		checkNoResidue(t, data)
		checkNoCgroups(t, a, c.ID)
		if st, _ := a.call("POST", "/v1/computers/"+c.ID+"/commands", bothy.RunRequest{Argv: []string{"true"}}, nil); st != 409 {
			t.Errorf("run on a destroyed computer: %d", st)
		}
		s.stop(t)
		checkLeasesReleased(t, data, storeArgs, c.ID)
	})
}

// adminToken makes a token with `bothy admin token create`.
func adminToken(t *testing.T, data string, storeArgs []string, tenant, scopes string) string {
	t.Helper()
	args := append([]string{"admin", "token", "create", "--data", data, "--tenant", tenant, "--owner", "bob", "--scopes", scopes}, storeArgs...)
	out, err := bothyCmd(t, args...).Output()
	if err != nil {
		t.Fatalf("admin token create: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// checkNoCgroups fails if a cgroup of a lease that ran the computer's
// commands is left.
func checkNoCgroups(t *testing.T, a *apiClient, computerID string) {
	t.Helper()
	leases := map[string]bool{}
	for _, c := range a.commands(computerID) {
		if c.LeaseID != "" {
			leases[c.LeaseID] = true
		}
	}
	if len(leases) == 0 {
		t.Fatal("no command names a lease")
	}
	for lease := range leases {
		for _, ctl := range []string{"memory", "pids", "cpu"} {
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctl, "bothy", lease)); err == nil {
				t.Errorf("cgroup left: %s/bothy/%s", ctl, lease)
			}
		}
	}
}

// TestE2E_FanOut: 30 computers for one conversation are records only:
// cold, generation 0 (no lease ever), and nothing on the host.
func TestE2E_FanOut(t *testing.T) {
	needSandbox(t)
	stores(t, func(t *testing.T, storeArgs []string) {
		data := t.TempDir()
		s := startServeWith(t, data, nil, storeArgs...)
		a := newAPI(t, s, serverToken(t, s, data))
		for i := range 30 {
			a.createWith(bhttp.CreateComputerRequest{ConversationID: "conv-1", Label: fmt.Sprint("c", i)})
		}
		list := a.computers(bothy.ComputerFilter{ConversationID: "conv-1"})
		if len(list) != 30 {
			t.Fatalf("the conversation has %d computers", len(list))
		}
		for _, c := range list {
			if c.State != bothy.StateCold || c.Generation != 0 {
				t.Errorf("computer %s is %s at generation %d", c.ID, c.State, c.Generation)
			}
		}
		checkNoResidue(t, data)
		if ents, _ := os.ReadDir(filepath.Join(data, "cache")); len(ents) > 0 {
			t.Errorf("the host cache holds %d trees", len(ents))
		}
		s.stop(t)
	})
}

// TestE2E_IdleStop: a computer that runs nothing for the idle timeout is
// checkpointed, its lease released, and it goes back to cold.
func TestE2E_IdleStop(t *testing.T) {
	needSandbox(t)
	data, s, a := serveAPI(t, "--idle-timeout", "1s")
	c := a.create("idle")
	a.run(c.ID, bothy.RunRequest{Script: "echo kept > idle.txt", Wait: true})
	a.waitState(c.ID, bothy.StateCold)
	checkNoResidue(t, data)
	if got := a.readFile(c.ID, "idle.txt"); got != "kept\n" {
		t.Fatalf("idle.txt = %q", got)
	}
	destroyAll(t, a, data)
	s.stop(t)
}

// TestE2E_OutputArchiveAndStdin: stdin reaches the command; output past
// the 16 MiB retention bound is cut with a truncated event, and the whole
// output is archived as a blob named by its digest.
func TestE2E_OutputArchiveAndStdin(t *testing.T) {
	needSandbox(t)
	data, s, a := serveAPI(t)
	c := a.create("archive")
	in := a.run(c.ID, bothy.RunRequest{Argv: []string{"tr", "a-z", "A-Z"}, Stdin: "from stdin\n", Wait: true})
	if got := output(a.events(in.ID, 0, nil)); got != "FROM STDIN\n" {
		t.Fatalf("stdin: %q", got)
	}

	const n = 17 << 20
	big := a.run(c.ID, bothy.RunRequest{Script: fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a; echo; echo tail >&2", n), Wait: true})
	if big.State != bothy.CommandCompleted || !big.Truncated || !strings.HasPrefix(big.OutputDigest, "sha256:") {
		t.Fatalf("big command: state %s, truncated %v, digest %q", big.State, big.Truncated, big.OutputDigest)
	}
	events := a.events(big.ID, 0, nil)
	checkSeqs(t, events, 1)
	retained, truncated := 0, false
	for _, e := range events {
		if e.Kind == bothy.EventStdout {
			retained += len(e.Data)
		}
		truncated = truncated || e.Kind == bothy.EventTruncated
	}
	if !truncated || retained != 16<<20 {
		t.Fatalf("retained %d bytes, truncated event %v", retained, truncated)
	}
	sum := strings.TrimPrefix(big.OutputDigest, "sha256:")
	b, err := os.ReadFile(filepath.Join(data, "blobs", "outputs", "default", sum))
	if err != nil {
		t.Fatalf("the archive blob: %v", err)
	}
	var stdout, stderr []byte
	for len(b) >= 5 {
		k, l := b[0], int(b[1])|int(b[2])<<8|int(b[3])<<16|int(b[4])<<24
		if k == 1 {
			stdout = append(stdout, b[5:5+l]...)
		} else {
			stderr = append(stderr, b[5:5+l]...)
		}
		b = b[5+l:]
	}
	if len(stdout) != n+1 || string(stderr) != "tail\n" {
		t.Fatalf("archive holds %d stdout bytes and stderr %q, want %d and \"tail\\n\"", len(stdout), stderr, n+1)
	}
	destroyAll(t, a, data)
	s.stop(t)
}

// TestE2E_MaxLifetime: a lease past its maximum lifetime is stopped even
// while a command runs; the command is cancelled and the computer is cold.
func TestE2E_MaxLifetime(t *testing.T) {
	needSandbox(t)
	data, s, a := serveAPI(t, "--max-lifetime", "2s")
	c := a.create("lifetime")
	cmd := a.run(c.ID, bothy.RunRequest{Script: "echo started; sleep 120"})
	if got := a.wait(cmd.ID); got.State != bothy.CommandCancelled {
		t.Fatalf("the command outliving the lease is %s, want cancelled", got.State)
	}
	a.waitState(c.ID, bothy.StateCold)
	checkNoResidue(t, data)
	destroyAll(t, a, data)
	s.stop(t)
}

// TestE2E_SandboxDies: when a lease's sandbox dies under it (its init is
// killed from the host, as the kernel's OOM killer might), the command
// running in it ends with sandbox_lost, the lease is released as lost, and
// a command sent after the death runs on a new lease (it never started in
// the dead sandbox), with the workspace as last checkpointed.
func TestE2E_SandboxDies(t *testing.T) {
	needSandbox(t)
	data, s, a := serveAPI(t)
	c := a.create("dies")
	first := a.run(c.ID, bothy.RunRequest{Script: "echo kept > kept.txt", Wait: true})
	if first.State != bothy.CommandCompleted {
		t.Fatalf("first command: %s", first.State)
	}
	b, err := os.ReadFile(filepath.Join(data, "agent", "leases", first.LeaseID, "lease.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Handle struct {
			State struct {
				Holder int `json:"holder"`
			} `json:"state"`
		} `json:"handle"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.Handle.State.Holder <= 0 {
		t.Fatalf("lease record %s: %v", b, err)
	}
	// A command runs when the sandbox dies.
	running := a.run(c.ID, bothy.RunRequest{Script: "echo started; sleep 120"})
	a.events(running.ID, 0, func(e *bothy.Event) bool { return e.Kind == bothy.EventStdout })
	holder := rec.Handle.State.Holder
	if err := syscall.Kill(holder, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The init is gone (or a zombie) before the next command is sent.
	for i := 0; !processEnded(holder); i++ {
		if i == 2000 {
			t.Fatalf("the sandbox's init %d outlives SIGKILL", holder)
		}
		time.Sleep(5 * time.Millisecond)
	}
	after := a.run(c.ID, bothy.RunRequest{Argv: []string{"cat", "kept.txt"}, Wait: true})
	if got := output(a.events(after.ID, 0, nil)); after.State != bothy.CommandCompleted || got != "kept\n" || after.Generation <= first.Generation {
		t.Fatalf("a command sent after the sandbox died: %s %q at generation %d (first %d)", after.State, got, after.Generation, first.Generation)
	}
	if got := a.wait(running.ID); !got.SandboxLost || got.Generation != first.Generation {
		t.Fatalf("the command running when the sandbox died: %s exit %v sandbox_lost %v at generation %d", got.State, got.ExitCode, got.SandboxLost, got.Generation)
	}
	destroyAll(t, a, data)
	s.stop(t)
}

// processEnded reports whether process pid is gone or a zombie.
func processEnded(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

// TestE2E_Exhaustion: a memory hog and a fork bomb are contained by their
// lease's limits and reported in the command's exit event, and another
// computer keeps answering. Every command runs under the open-file limit.
func TestE2E_Exhaustion(t *testing.T) {
	needSandbox(t)
	data, s, a := serveAPI(t, "--lease-memory", "64MiB", "--lease-pids", "256", "--lease-scratch", "32MiB", "--lease-nofile", "512")
	hog, bomb, filler, files, loop, other := a.create("hog"), a.create("bomb"), a.create("filler"), a.create("files"), a.create("loop"), a.create("other")

	// All five at once, each in its own computer; the sixth answers
	// meanwhile.
	runs := map[string]*bothy.Command{
		"hog":  a.run(hog.ID, bothy.RunRequest{Argv: []string{"perl", "-e", `$x = "a" x (512*1024*1024); print "survived\n"`}}),
		"bomb": a.run(bomb.ID, bothy.RunRequest{Script: "f() { f | f & }; f; sleep 2", TimeoutMS: 4000}),
		// One file past the scratch limit: the write fails (SIGXFSZ).
		"filler": a.run(filler.ID, bothy.RunRequest{Argv: []string{"dd", "if=/dev/zero", "of=big", "bs=1M", "count=100", "status=none"}}),
		// Many files, none past the limit alone: the watcher kills it.
		"files": a.run(files.ID, bothy.RunRequest{Script: "i=0; while :; do head -c 1048576 /dev/zero > f$i; i=$((i+1)); sleep 0.02; done", TimeoutMS: 60000}),
		"loop":  a.run(loop.ID, bothy.RunRequest{Script: "while :; do :; done", TimeoutMS: 3000}),
	}
	o := a.run(other.ID, bothy.RunRequest{Argv: []string{"echo", "ok"}, Wait: true})
	if got := output(a.events(o.ID, 0, nil)); o.State != bothy.CommandCompleted || got != "ok\n" {
		t.Fatalf("the other computer: %s %q", o.State, got)
	}
	o = a.run(other.ID, bothy.RunRequest{Script: "ulimit -Sn; ulimit -Hn", Wait: true})
	if got := output(a.events(o.ID, 0, nil)); o.State != bothy.CommandCompleted || got != "512\n512\n" {
		t.Errorf("open files under --lease-nofile 512: %s %q", o.State, got)
	}
	// A command's own memory limit, within the lease's.
	own := a.run(other.ID, bothy.RunRequest{Argv: []string{"perl", "-e", `$x = "a" x (40*1024*1024); print "survived\n"`},
		Limits: bothy.Limits{MemoryBytes: 16 << 20}, Wait: true})
	if !own.OOMKilled || own.Limits.MemoryBytes != 16<<20 {
		t.Errorf("a command over its own memory limit: %s exit %v oom_killed %v limits %+v", own.State, own.ExitCode, own.OOMKilled, own.Limits)
	}
	for name, c := range runs {
		runs[name] = a.wait(c.ID)
	}
	if h := runs["hog"]; h.State != bothy.CommandCompleted || h.ExitCode == nil || *h.ExitCode == 0 || !h.OOMKilled {
		t.Errorf("memory hog: %s, exit %v, oom_killed %v", h.State, h.ExitCode, h.OOMKilled)
	}
	if b := runs["bomb"]; !b.PidsLimited {
		t.Errorf("fork bomb: %s, pids_limited %v", b.State, b.PidsLimited)
	}
	if f := runs["filler"]; !f.DiskLimited {
		t.Errorf("one big file: %s exit %v, disk_limited %v", f.State, f.ExitCode, f.DiskLimited)
	}
	if f := runs["files"]; !f.DiskLimited || f.State == bothy.CommandTimedOut {
		t.Errorf("many files: %s exit %v, disk_limited %v", f.State, f.ExitCode, f.DiskLimited)
	}
	l := runs["loop"]
	if l.State != bothy.CommandTimedOut {
		t.Errorf("busy loop: %s, want timed_out", l.State)
	}
	// The loop's CPU time is metered: it ran for about its timeout, on at
	// most the lease's one CPU.
	if u := l.Usage; u.CPUMicros < 500_000 || u.CPUMicros > (l.DurationMS+500)*1000 || u.PeakMemoryBytes <= 0 {
		t.Errorf("busy loop usage %+v over %d ms", u, l.DurationMS)
	}
	if c := a.computer(loop.ID); c.Usage.CPUMicros < l.Usage.CPUMicros {
		t.Errorf("computer usage %+v, below its command's %+v", c.Usage, l.Usage)
	}
	// A computer over its scratch limit can still be cleaned up.
	rm := a.run(files.ID, bothy.RunRequest{Script: "rm -f f*; echo cleaned", Wait: true})
	if got := output(a.events(rm.ID, 0, nil)); rm.State != bothy.CommandCompleted || got != "cleaned\n" || rm.DiskLimited {
		t.Errorf("clean-up after the limit: %s %q disk_limited %v", rm.State, got, rm.DiskLimited)
	}
	destroyAll(t, a, data)
	s.stop(t)
}

// TestE2E_DefaultCommandTimeout: a run without timeout_ms times out at
// the server's --command-timeout; one with its own runs to its end.
func TestE2E_DefaultCommandTimeout(t *testing.T) {
	needSandbox(t)
	data, s, a := serveAPI(t, "--command-timeout", "1s")
	comp := a.create("timeout")
	c := a.wait(a.run(comp.ID, bothy.RunRequest{Argv: []string{"sleep", "30"}}).ID)
	if c.State != bothy.CommandTimedOut || c.TimeoutMS != 1000 {
		t.Errorf("sleep 30 without a timeout: %s, timeout_ms %d; want timed_out at 1000", c.State, c.TimeoutMS)
	}
	c = a.run(comp.ID, bothy.RunRequest{Script: "sleep 2; echo slept", TimeoutMS: 30000, Wait: true})
	if got := output(a.events(c.ID, 0, nil)); c.State != bothy.CommandCompleted || got != "slept\n" {
		t.Errorf("sleep 2 with timeout_ms 30000: %s %q", c.State, got)
	}
	destroyAll(t, a, data)
	s.stop(t)
}

// TestE2E_BackgroundMetered: CPU spent by a process that outlives its
// command shows in no command's usage, but the computer is charged for it
// when the lease ends (bwrap's LeaseUsage, less what its commands were
// charged), so that its CPU budget counts it.
func TestE2E_BackgroundMetered(t *testing.T) {
	needSandbox(t)
	data, s, a := serveAPI(t)
	c := a.create("background")
	cmd := a.run(c.ID, bothy.RunRequest{Script: "(timeout 2 sh -c 'while :; do :; done') >/dev/null 2>&1 & echo started", Wait: true})
	if cmd.State != bothy.CommandCompleted || cmd.Usage.CPUMicros > 500_000 {
		t.Fatalf("command %s usage %+v: want it to end at once, having used little", cmd.State, cmd.Usage)
	}
	time.Sleep(2500 * time.Millisecond) // the loop runs out its 2 s
	before := a.computer(c.ID).Usage.CPUMicros
	a.stop(c.ID)
	after := a.computer(c.ID).Usage.CPUMicros
	if before != cmd.Usage.CPUMicros {
		t.Errorf("before the stop the computer shows %d µs, want its command's %d", before, cmd.Usage.CPUMicros)
	}
	// Two seconds of a busy loop on a shared 2-CPU host: at least a
	// quarter of that, whatever else ran.
	if after-before < 500_000 {
		t.Errorf("the lease's end charged %d µs for a 2 s background loop (computer %d, command %d)", after-before, after, cmd.Usage.CPUMicros)
	}
	destroyAll(t, a, data)
	s.stop(t)
}

package sandbox_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/sandbox"
	"github.com/bothyhq/bothy/testenv"
)

func TestEnviron(t *testing.T) {
	got := sandbox.Environ(map[string]string{"PATH": "/bin", "HOME": "/h"},
		map[string]string{"LEASE": "l", "HOME": "/lease"}, map[string]string{"HOME": "/cmd"})
	if want := []string{"HOME=/cmd", "LEASE=l", "PATH=/bin"}; !slices.Equal(got, want) {
		t.Fatalf("Environ = %q, want %q", got, want)
	}
	base := sandbox.Inside()
	sandbox.Environ(base, map[string]string{"HOME": "/x"})
	if base["HOME"] != "/workspace" {
		t.Fatalf("Environ changed its base: %v", base)
	}
}

func TestInitProgram(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		testenv.Skip(t, "no perl, which the isolating providers need")
	}
	for _, fd := range []int{0, 4} {
		prog := sandbox.InitProgram(fd)
		if err := exec.Command("perl", "-c", "-e", prog).Run(); err != nil {
			t.Errorf("InitProgram(%d) does not compile: %v\n%s", fd, err, prog)
		}
		if ready := strings.Contains(prog, `"ready\n"`); ready != (fd > 0) {
			t.Errorf("InitProgram(%d) writes ready: %v", fd, ready)
		}
	}
}

func TestNeeds(t *testing.T) {
	var n sandbox.Needs
	sh := "sh"
	n.Program(&sh, "sh")
	n.Files("/")
	if !n.Met() || n.Err("test") != nil || !filepath.IsAbs(sh) {
		t.Fatalf("with sh and /: met %v, error %v, sh %q", n.Met(), n.Err("test"), sh)
	}
	missing := ""
	n.Program(&missing, "bothy-no-such-program")
	n.Files("/bothy-no-such-file")
	err := n.Err("test")
	if err == nil || !strings.HasPrefix(err.Error(), "test provider needs ") ||
		!strings.Contains(err.Error(), "the bothy-no-such-program program") || !strings.Contains(err.Error(), "/bothy-no-such-file") {
		t.Fatalf("Err = %v, want both missing", err)
	}
}

func TestKillAll(t *testing.T) {
	cmd := exec.Command("sleep", "300.424242")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	list := func() []int {
		return sandbox.Processes(func(pid int) bool {
			b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
			return strings.Contains(string(b), "300.424242")
		})
	}
	if pids := list(); !slices.Equal(pids, []int{cmd.Process.Pid}) {
		t.Fatalf("Processes = %v, want [%d]", pids, cmd.Process.Pid)
	}
	// The child stays a zombie until Wait reaps it: list no more once
	// it has.
	reaped := func() []int {
		select {
		case <-done:
			return nil
		default:
			return list()
		}
	}
	if left := sandbox.KillAll(reaped, 5*time.Second); left != nil {
		t.Fatalf("KillAll left %v", left)
	}
}

func TestDecode(t *testing.T) {
	h, err := bothy.NewSandboxHandle("p", bothy.LeaseSpec{LeaseID: "l1", ComputerID: "c1", Generation: 1, Workspace: "/w"}, map[string]int{"uid": 7})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := h.Encode()
	decode := func(h *bothy.SandboxHandle) (int, error) {
		var st struct{ UID int }
		if json.Unmarshal(h.State, &st) != nil || st.UID == 0 {
			return 0, bothy.Errorf(bothy.EINVALID, "no uid")
		}
		return st.UID, nil
	}
	t.Run("OK", func(t *testing.T) {
		h2, uid, err := sandbox.Decode(b, "p", decode)
		if err != nil || h2.LeaseID != "l1" || uid != 7 {
			t.Fatalf("Decode = %+v, %d, %v", h2, uid, err)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		if _, _, err := sandbox.Decode(b, "other", decode); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Errorf("another provider's handle: %v", err)
		}
		h.State = json.RawMessage(`{}`)
		b, _ := h.Encode()
		if _, _, err := sandbox.Decode(b, "p", decode); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Errorf("a handle without state: %v", err)
		}
	})
}

func TestLeases_Create(t *testing.T) {
	state := t.TempDir()
	l := sandbox.NewLeases(sandbox.Host{StateDir: state, UIDBase: 400000, UIDCount: 2}, nil)
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	spec := bothy.LeaseSpec{LeaseID: "l1", ComputerID: "c1", Generation: 1, Workspace: ws}
	t.Run("OK", func(t *testing.T) {
		dir, err := l.Create(spec, 0o700)
		if err != nil || dir != filepath.Join(state, "leases", "l1") {
			t.Fatalf("Create = %q, %v", dir, err)
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("lease directory %v, %v", fi, err)
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		if _, err := l.Create(spec, 0o700); bothy.ErrorCode(err) != bothy.ECONFLICT {
			t.Fatalf("second Create: %v, want %s", err, bothy.ECONFLICT)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		file := filepath.Join(ws, "file")
		os.WriteFile(file, nil, 0o644)
		for name, s := range map[string]bothy.LeaseSpec{
			"no lease id":      {ComputerID: "c1", Generation: 1, Workspace: ws},
			"file workspace":   {LeaseID: "l2", ComputerID: "c1", Generation: 1, Workspace: file},
			"dir as namespace": {LeaseID: "l3", ComputerID: "c1", Generation: 1, Workspace: ws, NetNS: ws},
		} {
			if _, err := l.Create(s, 0o700); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("%s: %v, want %s", name, err, bothy.EINVALID)
			}
		}
	})
}

func TestHost_WithDefaults(t *testing.T) {
	d := sandbox.Host{StateDir: "/run/p", CgroupParent: "p", UIDBase: 1000}
	got := sandbox.Host{StateDir: "/mine", UIDCount: 2}.WithDefaults(d)
	want := sandbox.Host{StateDir: "/mine", CgroupRoot: sandbox.DefaultCgroupRoot, CgroupParent: "p", UIDBase: 1000, UIDCount: 2}
	if got != want {
		t.Fatalf("WithDefaults = %+v, want %+v", got, want)
	}
}

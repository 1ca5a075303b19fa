package cgroupfs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/bothyhq/bothy/cgroupfs"
	"github.com/bothyhq/bothy/testenv"
)

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadPids(t *testing.T) {
	dir := t.TempDir()
	t.Run("OK", func(t *testing.T) {
		procs := filepath.Join(dir, "cgroup.procs")
		write(t, procs, "12\n345\n")
		if pids, err := cgroupfs.ReadPids(procs); err != nil || !slices.Equal(pids, []int{12, 345}) {
			t.Fatalf("ReadPids = %v, %v; want [12 345]", pids, err)
		}
	})
	t.Run("ErrNotExist", func(t *testing.T) {
		if _, err := cgroupfs.ReadPids(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
			t.Fatalf("ReadPids of a missing file: %v", err)
		}
	})
}

func TestReadCounter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memory.oom_control")
	write(t, path, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
	for key, want := range map[string]int64{"oom_kill": 3, "under_oom": 0, "missing": 0} {
		if got := cgroupfs.ReadCounter(path, key); got != want {
			t.Errorf("ReadCounter(%q) = %d, want %d", key, got, want)
		}
	}
	if got := cgroupfs.ReadCounter(path+".missing", "oom_kill"); got != 0 {
		t.Errorf("ReadCounter of a missing file = %d, want 0", got)
	}
}

func TestReadInt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpuacct.usage")
	write(t, path, "123456789\n")
	if got := cgroupfs.ReadInt(path); got != 123456789 {
		t.Errorf("ReadInt = %d, want 123456789", got)
	}
	if got := cgroupfs.ReadInt(path + ".missing"); got != 0 {
		t.Errorf("ReadInt of a missing file = %d, want 0", got)
	}
}

func TestKill(t *testing.T) {
	dir := t.TempDir()
	t.Run("Missing", func(t *testing.T) {
		if err := cgroupfs.Kill(filepath.Join(dir, "missing"), time.Second); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Empty", func(t *testing.T) {
		write(t, filepath.Join(dir, "cgroup.procs"), "")
		if err := cgroupfs.Kill(dir, time.Second); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Nested", func(t *testing.T) {
		// A v1 parent's cgroup.procs does not list its children's
		// processes: Kill finds them there.
		root := "/sys/fs/cgroup/pids"
		testenv.Root(t, "needs root to create cgroups")
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			testenv.Skip(t, "no cgroup v1 pids hierarchy")
		}
		parent := filepath.Join(root, fmt.Sprintf("cgroupfs-test-%d", os.Getpid()))
		child := filepath.Join(parent, "child")
		if err := os.MkdirAll(child, 0o755); err != nil {
			t.Fatal(err)
		}
		defer cgroupfs.Remove(parent, 2*time.Second)
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		write(t, filepath.Join(child, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid))
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if err := cgroupfs.Kill(parent, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the process in the child cgroup survived Kill")
		}
		if err := cgroupfs.Remove(parent, 2*time.Second); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRemove(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "lease")
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Run("OK", func(t *testing.T) {
		if err := cgroupfs.Remove(dir, time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Fatalf("%s still there: %v", dir, err)
		}
	})
	t.Run("Missing", func(t *testing.T) {
		if err := cgroupfs.Remove(dir, time.Second); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCounters(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "cpuacct.usage"), "2000000\n")
	write(t, filepath.Join(dir, "memory.usage_in_bytes"), "4096\n")
	write(t, filepath.Join(dir, "memory.max_usage_in_bytes"), "8192\n")
	write(t, filepath.Join(dir, "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
	write(t, filepath.Join(dir, "pids.events"), "max 5\n")
	for name, c := range map[string]struct{ got, want int64 }{
		"CPUNanos":    {cgroupfs.CPUNanos(dir), 2000000},
		"Memory":      {cgroupfs.Memory(dir), 4096},
		"MemoryPeak":  {cgroupfs.MemoryPeak(dir), 8192},
		"OOMKills":    {cgroupfs.OOMKills(dir), 2},
		"PidsRefused": {cgroupfs.PidsRefused(dir), 5},
		"missing":     {cgroupfs.OOMKills(filepath.Join(dir, "missing")), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", name, c.got, c.want)
		}
	}
}

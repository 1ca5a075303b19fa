package bwrap

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/bothyhq/bothy/cgroupfs"
)

// The cgroup v1 controllers that hold a lease's limits.
var controllers = []string{"memory", "pids", "cpu"}

// cgroupPaths are a lease's cgroup directories: one leaf per v1 controller
// for the limits, and one directory in the v2 unified hierarchy whose
// children (one per command) give cgroup.kill and an exact process list.
type cgroupPaths struct {
	V1      map[string]string `json:"v1"`
	Unified string            `json:"unified"`
}

func (c *cgroupPaths) all() []string {
	var out []string
	for _, ctl := range controllers {
		out = append(out, c.V1[ctl])
	}
	return append(out, c.Unified)
}

// procsFiles are the cgroup.procs files a command's enter program (or the
// holder's trampoline) writes its pid to: the lease's v1 leaves and the command's own unified leaf.
func (c *cgroupPaths) procsFiles(execLeaf string) []string {
	var out []string
	for _, ctl := range controllers {
		out = append(out, filepath.Join(c.V1[ctl], "cgroup.procs"))
	}
	return append(out, filepath.Join(execLeaf, "cgroup.procs"))
}

func writeFile(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// populated reports whether a unified cgroup or any of its descendants
// holds a process; a missing cgroup holds none.
func populated(dir string) bool {
	return cgroupfs.ReadCounter(filepath.Join(dir, "cgroup.events"), "populated") != 0
}

// signalLeaf sends sig to every process of a unified command leaf. SIGKILL
// goes through cgroup.kill, which reaches processes forked meanwhile too.
// Other signals spare the command's main process (the enter program that
// waits for the command, given as spare): it forwards no signal, so SIGTERM to it
// would end Exec at once and take the command's grace period away.
func signalLeaf(leaf string, sig syscall.Signal, spare int) {
	if sig == syscall.SIGKILL {
		os.WriteFile(filepath.Join(leaf, "cgroup.kill"), []byte("1"), 0)
		return
	}
	pids, _ := cgroupfs.ReadPids(filepath.Join(leaf, "cgroup.procs"))
	for _, pid := range pids {
		if pid != spare {
			syscall.Kill(pid, sig)
		}
	}
}

// waitEmpty polls until the unified cgroup dir holds no process, for at
// most d, and reports whether it is empty.
func waitEmpty(dir string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for populated(dir) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

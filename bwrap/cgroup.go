package bwrap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
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

// readPids returns the pids listed in a cgroup.procs file.
func readPids(procs string) ([]int, error) {
	b, err := os.ReadFile(procs)
	if err != nil {
		return nil, err
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// readCounter returns the value of key in a flat-keyed cgroup file such as
// memory.oom_control or pids.events, or 0 if it cannot be read.
func readCounter(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// populated reports whether a unified cgroup or any of its descendants
// holds a process; a missing cgroup holds none.
func populated(dir string) bool {
	return readCounter(filepath.Join(dir, "cgroup.events"), "populated") != 0
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
	pids, _ := readPids(filepath.Join(leaf, "cgroup.procs"))
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

// killV1 empties a v1 cgroup by sending SIGKILL to its processes until none
// is left, for at most d. v1 has no cgroup.kill, so a process forked
// between a read and the kills is caught by the next round.
func killV1(dir string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) || err == nil && len(pids) == 0 {
			return nil
		} else if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still holds processes %v", dir, pids)
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// removeCgroup removes a cgroup directory and its child cgroups, retrying
// for at most d while exiting processes are reaped; a missing one is not
// an error.
func removeCgroup(dir string, d time.Duration) error {
	entries, _ := os.ReadDir(dir)
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, removeCgroup(filepath.Join(dir, e.Name()), d))
		}
	}
	deadline := time.Now().Add(d)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || err == syscall.ENOENT {
			return errors.Join(errs...)
		} else if err != syscall.EBUSY || time.Now().After(deadline) {
			return errors.Join(append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

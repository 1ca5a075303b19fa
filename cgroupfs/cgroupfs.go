// Package cgroupfs reads and empties cgroup directories in the cgroup
// filesystem, v1 or v2, through their files alone.
package cgroupfs

import (
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

// ReadPids returns the pids listed in a cgroup.procs file.
func ReadPids(procs string) ([]int, error) {
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

// ReadCounter returns the value of key in a flat-keyed cgroup file such as
// memory.oom_control, pids.events or cgroup.events, or 0 if it cannot be
// read.
func ReadCounter(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// ReadInt returns the number in a single-value cgroup file such as
// cpuacct.usage or memory.max_usage_in_bytes, or 0 if it cannot be read.
func ReadInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// Kill empties a cgroup and its child cgroups by sending SIGKILL to their
// processes until none is left, for at most d. It is for v1, which has no
// cgroup.kill: a process forked between a read and the kills is caught by
// the next round. A missing cgroup is empty.
func Kill(dir string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		pids, err := pidsUnder(dir)
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

// pidsUnder returns the pids in a cgroup and its descendants: in v1, a
// parent's cgroup.procs does not list its children's processes. A child
// removed meanwhile holds none.
func pidsUnder(dir string) ([]int, error) {
	pids, err := ReadPids(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		more, err := pidsUnder(filepath.Join(dir, e.Name()))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		pids = append(pids, more...)
	}
	return pids, nil
}

// Remove removes a cgroup directory and its child cgroups, retrying for at
// most d while exiting processes are reaped; a missing one is not an
// error.
func Remove(dir string, d time.Duration) error {
	entries, _ := os.ReadDir(dir)
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, Remove(filepath.Join(dir, e.Name()), d))
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

// The counters of a cgroup v1 directory by which the providers meter
// commands and leases and tell why a command ended. Each is 0 if it
// cannot be read.

// CPUNanos returns cpuacct.usage of a cpuacct cgroup: the CPU time of its
// processes and its children's, user and system, in nanoseconds.
func CPUNanos(dir string) int64 { return ReadInt(filepath.Join(dir, "cpuacct.usage")) }

// Memory returns memory.usage_in_bytes of a memory cgroup: the memory
// charged to it now.
func Memory(dir string) int64 { return ReadInt(filepath.Join(dir, "memory.usage_in_bytes")) }

// MemoryPeak returns memory.max_usage_in_bytes of a memory cgroup: the
// most memory charged to it at once since it was made or reset.
func MemoryPeak(dir string) int64 { return ReadInt(filepath.Join(dir, "memory.max_usage_in_bytes")) }

// OOMKills returns the oom_kill counter of a memory cgroup: the processes
// that its limit killed. In v1 it counts only the cgroup of the process
// killed, not its parents.
func OOMKills(dir string) int64 {
	return ReadCounter(filepath.Join(dir, "memory.oom_control"), "oom_kill")
}

// PidsRefused returns the max counter of a pids cgroup's pids.events: the
// forks that its limit refused.
func PidsRefused(dir string) int64 { return ReadCounter(filepath.Join(dir, "pids.events"), "max") }

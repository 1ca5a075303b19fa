package bwrap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/cgroupfs"
	"github.com/bothyhq/bothy/sandbox"
)

// The cgroup v1 controllers under which a lease has a directory. The
// lease's limits are on its memory, pids and cpu directories; under memory
// and cpuacct (metered) each command also has a child of its own, for its
// usage. The limits apply to the children hierarchically (New checks
// memory.use_hierarchy).
var (
	controllers        = []string{"memory", "pids", "cpu", "cpuacct"}
	limitControllers   = []string{"memory", "pids", "cpu"}
	meteredControllers = []string{"memory", "cpuacct"}
)

// commandPrefix starts the name of a command's cgroups.
const commandPrefix = "x"

// cgroupPaths are a lease's cgroup directories: one per v1 controller, and
// one directory in the v2 unified hierarchy whose children (one per
// command) give cgroup.kill and an exact process list.
type cgroupPaths struct {
	// V1 holds the lease's directory by controller. Where cpu and cpuacct
	// are mounted together, both name the same directory; a handle written
	// before commands were metered has no cpuacct.
	V1      map[string]string `json:"v1"`
	Unified string            `json:"unified"`
}

// v1Dirs returns the lease's v1 directories, each once, in the order of
// controllers.
func (c *cgroupPaths) v1Dirs() []string {
	var out []string
	for _, ctl := range controllers {
		if dir := c.V1[ctl]; dir != "" && !slices.Contains(out, dir) {
			out = append(out, dir)
		}
	}
	return out
}

func (c *cgroupPaths) all() []string {
	return append(c.v1Dirs(), c.Unified)
}

// procsFiles are the cgroup.procs files a command's enter program (or the
// holder's trampoline) writes its pid to: the lease's v1 directories, or a
// command's own child where cmd has one, then cmd's unified leaf (for the
// holder, a commandCgroups with only that).
func (c *cgroupPaths) procsFiles(cmd *commandCgroups) []string {
	var out []string
	for _, dir := range c.v1Dirs() {
		for _, ctl := range controllers {
			if c.V1[ctl] == dir && cmd.v1[ctl] != "" {
				dir = cmd.v1[ctl]
				break
			}
		}
		out = append(out, filepath.Join(dir, "cgroup.procs"))
	}
	return append(out, filepath.Join(cmd.unified, "cgroup.procs"))
}

// command returns the cgroups of a command named name: a child under the
// metered controllers, and under pids and cpu too when lim sets the
// command's own pids or CPU limit.
func (c *cgroupPaths) command(name string, lim bothy.Limits) *commandCgroups {
	cmd := &commandCgroups{unified: filepath.Join(c.Unified, name), v1: make(map[string]string)}
	ctls := slices.Clone(meteredControllers)
	if lim.Pids > 0 {
		ctls = append(ctls, "pids")
	}
	if lim.CPUMillis > 0 {
		ctls = append(ctls, "cpu")
	}
	for _, ctl := range ctls {
		if dir := c.V1[ctl]; dir != "" {
			cmd.v1[ctl] = filepath.Join(dir, name)
		}
	}
	return cmd
}

// sweepLeaves removes the command cgroups of a lease that have emptied
// since their command ended. A leaf younger than a minute is left alone: it
// may be a command's that is starting.
func (c *cgroupPaths) sweepLeaves() {
	parents := []string{c.Unified}
	for _, dir := range c.v1Dirs() {
		parents = append(parents, dir)
	}
	for _, parent := range parents {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), commandPrefix) {
				continue
			}
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Minute {
				syscall.Rmdir(filepath.Join(parent, e.Name()))
			}
		}
	}
}

// oomKills returns the oom_kill counter of the lease's memory cgroup and
// of each of its children. In v1 the counter is not hierarchical: a kill
// counts only in the cgroup of the process killed.
func (c *cgroupPaths) oomKills() map[string]int64 {
	dir := c.V1["memory"]
	counts := map[string]int64{dir: cgroupfs.OOMKills(dir)}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			child := filepath.Join(dir, e.Name())
			counts[child] = cgroupfs.OOMKills(child)
		}
	}
	return counts
}

// oomKilledSince reports whether the memory limit killed a process of the
// lease since the counts before were taken. A cgroup removed meanwhile is
// missed: its command had ended, and its kills were reported then.
func (c *cgroupPaths) oomKilledSince(before map[string]int64) bool {
	for dir, n := range c.oomKills() {
		if n > before[dir] {
			return true
		}
	}
	return false
}

// commandCgroups are one command's cgroups: a leaf in the unified
// hierarchy for cgroup.kill and its process list, and a child of the
// lease's directory under each metered v1 controller for its usage.
type commandCgroups struct {
	unified string
	v1      map[string]string // by controller
}

func (cmd *commandCgroups) dirs() []string {
	out := []string{cmd.unified}
	for _, ctl := range controllers {
		if dir := cmd.v1[ctl]; dir != "" && !slices.Contains(out, dir) {
			out = append(out, dir)
		}
	}
	return out
}

// create makes the command's cgroups and sets the command's own limits in
// them, or leaves none of them.
func (cmd *commandCgroups) create(lim bothy.Limits) error {
	var made []string
	undo := func(err error) error {
		for _, d := range slices.Backward(made) {
			syscall.Rmdir(d)
		}
		return err
	}
	for _, dir := range cmd.dirs() {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return undo(fmt.Errorf("create command cgroup: %w", err))
		}
		made = append(made, dir)
	}
	if lim.MemoryBytes > 0 {
		mem := cmd.v1["memory"]
		if err := writeFile(filepath.Join(mem, "memory.limit_in_bytes"), strconv.FormatInt(lim.MemoryBytes, 10)); err != nil {
			return undo(err)
		}
		if sw := filepath.Join(mem, "memory.memsw.limit_in_bytes"); sandbox.Exists(sw) {
			if err := writeFile(sw, strconv.FormatInt(lim.MemoryBytes, 10)); err != nil {
				return undo(err)
			}
		}
	}
	if lim.Pids > 0 {
		if err := writeFile(filepath.Join(cmd.v1["pids"], "pids.max"), strconv.FormatInt(lim.Pids, 10)); err != nil {
			return undo(err)
		}
	}
	if lim.CPUMillis > 0 {
		cpu := cmd.v1["cpu"]
		if err := writeFile(filepath.Join(cpu, "cpu.cfs_period_us"), "100000"); err != nil {
			return undo(err)
		}
		if err := writeFile(filepath.Join(cpu, "cpu.cfs_quota_us"), strconv.FormatInt(lim.CPUMillis*100, 10)); err != nil {
			return undo(err)
		}
	}
	return nil
}

// pidsLimited reports whether the command's own pids limit refused a fork.
func (cmd *commandCgroups) pidsLimited() bool {
	dir := cmd.v1["pids"]
	return dir != "" && cgroupfs.PidsRefused(dir) > 0
}

// remove removes the command's cgroups, waiting up to d for their exiting
// processes to be reaped. With d zero it only tries: a cgroup that still
// holds the command's background stays until it empties (sweepLeaves) or
// until Stop.
func (cmd *commandCgroups) remove(d time.Duration) error {
	var errs []error
	for _, dir := range cmd.dirs() {
		if d > 0 {
			errs = append(errs, cgroupfs.Remove(dir, d))
		} else if err := syscall.Rmdir(dir); err != nil && err != syscall.ENOENT && err != syscall.EBUSY {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// cpuMicros returns the CPU time that the command's processes used, user
// and system, or 0 if it has no cpuacct cgroup.
func (cmd *commandCgroups) cpuMicros() int64 {
	if dir := cmd.v1["cpuacct"]; dir != "" {
		return cgroupfs.CPUNanos(dir) / 1000
	}
	return 0
}

// memory returns the memory charged to the command's processes now.
func (cmd *commandCgroups) memory() int64 {
	return cgroupfs.Memory(cmd.v1["memory"])
}

// peakMemory returns the most memory charged to the command's processes
// at once.
func (cmd *commandCgroups) peakMemory() int64 {
	return cgroupfs.MemoryPeak(cmd.v1["memory"])
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

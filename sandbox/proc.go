package sandbox

import (
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Processes returns the pids of the host's processes, other than this one,
// for which match, which reads what it needs under /proc/PID, returns
// true.
func Processes(match func(pid int) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if match(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// KillAll sends SIGKILL to the processes that list returns, round after
// round until it returns none, for at most d, and returns those that are
// left then.
func KillAll(list func() []int, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for pids := list(); len(pids) > 0; pids = list() {
		if time.Now().After(deadline) {
			return pids
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

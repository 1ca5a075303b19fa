package sandbox

import (
	"fmt"
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseInheritedOnExec marks every descriptor of the process above
// standard error close-on-exec, so that none that it inherited from
// whoever started it (an open file of the shell, a descriptor a service
// manager leaked) reaches a program it starts: a supervisor, a sandbox,
// a command. What a child is meant to have it still gets, as the
// ExtraFiles of its exec.Cmd, which os/exec puts in place without the
// flag. bothy, bothy-supervisor and `bothy supervisor` call it first
// thing; it uses close_range(2) and, before Linux 5.11, walks
// /proc/self/fd.
func CloseInheritedOnExec() error {
	if unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) == nil {
		return nil
	}
	return closeOnExecByProc()
}

// closeOnExecByProc is CloseInheritedOnExec without close_range: it sets
// the flag on each descriptor that /proc/self/fd lists.
func closeOnExecByProc() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		// The directory's own descriptor is closed by now: EBADF.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return fmt.Errorf("mark descriptor %d close-on-exec: %w", fd, err)
		}
	}
	return nil
}

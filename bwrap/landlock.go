package bwrap

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Landlock restricts what a command may write, below the permission bits:
// the sandbox's root, its /dev and its /tmp are tmpfs directories that the
// lease's uid owns, and a command could otherwise create files anywhere in
// them. The enter program restricts each command, after no_new_privs and
// before it forks the command, so that it may
//
//   - read and execute everything it can see;
//   - create, change, rename and remove anything under /workspace, /tmp and
//     /dev/shm (but not make device nodes);
//   - write, truncate and ioctl the existing files of /dev (/dev/null, a
//     terminal) and write those of /proc (/proc/self/oom_score_adj), but
//     create nothing there.
//
// Writes elsewhere fail with EACCES, whatever the permission bits. The
// sandbox's pid 1 is not restricted: it runs no code of the lease.
//
// Each command restricts itself, so each is a Landlock domain of its own:
// a command cannot open /proc/PID/fd, /proc/PID/environ or /proc/PID/mem of
// a process that another command left running (signals and /proc/PID/stat
// and cmdline still work).

// minLandlockABI is the oldest Landlock ABI that commands are restricted
// with. Under ABI 1, which cannot allow LANDLOCK_ACCESS_FS_REFER, every
// rename or hard link into another directory fails with EXDEV, even within
// the workspace; a host that old runs commands without Landlock.
const minLandlockABI = 2

// landlockABI returns the host's Landlock ABI version, or 0 if it has none
// or one older than minLandlockABI.
func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 || int(v) < minLandlockABI {
		return 0
	}
	return int(v)
}

// landlockHandled returns the filesystem access rights that a Landlock
// ABI knows. ABI 4 added network rights, 6 scopes and 7 logging, none of
// which commands are restricted by: a command may signal and connect to
// what other commands left running.
func landlockHandled(abi int) uint64 {
	r := uint64(unix.LANDLOCK_ACCESS_FS_MAKE_SYM<<1 - 1) // ABI 1: EXECUTE to MAKE_SYM
	if abi >= 2 {
		r |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		r |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		r |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	return r
}

// landlockRules returns enterProgram's Landlock argument for an ABI: the
// handled rights, then the rights added beneath each path, as
// "HANDLED,RIGHTS:PATH,...". A path that the sandbox lacks gets no rule.
// It returns "-" for no Landlock (abi 0).
func landlockRules(abi int) string {
	if abi == 0 {
		return "-"
	}
	handled := landlockHandled(abi)
	read := uint64(unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR)
	write := handled &^ (unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK)
	files := handled & (unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV)
	procFiles := handled & (unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE)
	rules := []struct {
		path   string
		rights uint64
	}{
		{"/", read},
		{"/workspace", write},
		{"/tmp", write},
		{"/dev/shm", write},
		{"/dev", files},
		{"/proc", procFiles},
	}
	s := []string{fmt.Sprint(handled)}
	for _, r := range rules {
		s = append(s, fmt.Sprintf("%d:%s", r.rights, r.path))
	}
	return strings.Join(s, ",")
}

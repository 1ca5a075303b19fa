//go:build amd64 || arm64

package bwrap

import "golang.org/x/sys/unix"

// deniedSyscalls are the calls that fail with EPERM on both architectures,
// by their numbers on this one.
var deniedSyscalls = []uint32{
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT,
	unix.SYS_QUOTACTL, unix.SYS_QUOTACTL_FD, unix.SYS_LOOKUP_DCOOKIE,
	unix.SYS_VHANGUP, unix.SYS_SYSLOG,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_SETNS,
	unix.SYS_OPEN_TREE, unix.SYS_OPEN_TREE_ATTR, unix.SYS_MOVE_MOUNT,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK,
	unix.SYS_MOUNT_SETATTR,
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
}

// The calls whose arguments the filter checks.
const (
	sysClone       = unix.SYS_CLONE
	sysClone3      = unix.SYS_CLONE3
	sysUnshare     = unix.SYS_UNSHARE
	sysPersonality = unix.SYS_PERSONALITY
	sysSocket      = unix.SYS_SOCKET
	sysSocketpair  = unix.SYS_SOCKETPAIR
)

// enterSyscalls are the numbers of the calls that enterProgram makes.
var enterSyscalls = syscallNumbers{
	setgroups: unix.SYS_SETGROUPS, prctl: unix.SYS_PRCTL, setns: unix.SYS_SETNS,
	fchdir: unix.SYS_FCHDIR, setresgid: unix.SYS_SETRESGID, setresuid: unix.SYS_SETRESUID,
	seccomp: unix.SYS_SECCOMP, prlimit64: unix.SYS_PRLIMIT64,
	landlockCreateRuleset: unix.SYS_LANDLOCK_CREATE_RULESET, landlockAddRule: unix.SYS_LANDLOCK_ADD_RULE,
	landlockRestrictSelf: unix.SYS_LANDLOCK_RESTRICT_SELF, closeRange: unix.SYS_CLOSE_RANGE,
}

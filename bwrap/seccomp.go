package bwrap

import (
	"encoding/binary"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// The seccomp filter that every process of a sandbox runs under: its pid 1
// (bwrap --seccomp) and every command (the enter program installs it
// after it has entered the sandbox's namespaces and before it forks the
// command). A process inherits it across fork and exec, and nothing can
// remove it.
//
// It kills a process that makes a system call of another ABI than the
// host's (i386 through int 0x80, x32), returns EPERM for the calls below
// and allows everything else. The denied calls are ones a process without
// capabilities has no use for, or ones that widen the kernel's attack
// surface: mostly the kernel refuses them anyway for want of a capability,
// and the filter keeps their code out of reach altogether.
//
//   - keys: keyctl, add_key, request_key (the kernel's key retention
//     service, which no sandboxed program needs);
//   - kernel: bpf, perf_event_open, userfaultfd, kexec_load,
//     kexec_file_load, init_module, finit_module, delete_module, reboot,
//     swapon, swapoff, acct, quotactl, quotactl_fd, lookup_dcookie,
//     vhangup, syslog, io_uring_setup, io_uring_enter, io_uring_register;
//   - mounts and namespaces: mount, umount2, pivot_root, setns, the new
//     mount API (open_tree, open_tree_attr, move_mount, fsopen, fsconfig,
//     fsmount, fspick, mount_setattr), and unshare and clone with any
//     CLONE_NEW* flag, above all CLONE_NEWUSER, which would give the process
//     every capability in a namespace of its own. clone3 passes its flags
//     in memory, which a filter cannot read, so it fails with ENOSYS and
//     glibc falls back to clone;
//   - other processes and files: ptrace, process_vm_readv,
//     process_vm_writev, open_by_handle_at, name_to_handle_at. ptrace is
//     denied although strace and gdb need it on their own children: it has
//     been a steady source of kernel bugs (the gvisor provider implements
//     it in its own kernel);
//   - personality with a flag that a set-uid exec clears
//     (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ADDR_COMPAT_LAYOUT,
//     MMAP_PAGE_ZERO): no turning off address randomization;
//   - socket and socketpair of the AF_VSOCK family: a vsock reaches the
//     hypervisor and the other virtual machines' vsock services from any
//     network namespace, so the sandbox's network policy could not cover
//     it (the gvisor provider's kernel has no AF_VSOCK at all);
//   - on x86_64, iopl, ioperm and uselib.
//
// The verdict for every call other than clone, unshare, personality,
// socket and socketpair depends only on its number, so the kernel (5.11
// and later) caches the allowed ones and runs the filter only for those
// five and denied calls.

// machineABI describes a system call ABI. The arch files set machine to
// the host's; it is nil on an architecture the filter does not know, and
// New refuses to run there rather than run sandboxes unfiltered.
type machineABI struct {
	audit uint32 // AUDIT_ARCH_*, the arch field of seccomp_data
	// maxNr is the highest valid system call number plus one: on x86_64
	// numbers from 0x40000000 up are x32 calls, with the same arch value.
	maxNr uint32
	// extra are the denied calls that only this architecture has.
	extra []uint32
}

// Flags that the filter looks for in arguments.
const (
	// cloneNamespaces are the CLONE_NEW* flags of clone. CLONE_NEWTIME
	// (0x80) is only valid for unshare and clone3: in clone's flags those
	// bits are the exit signal.
	cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	unshareNamespaces = cloneNamespaces | unix.CLONE_NEWTIME
	// personalityUnsafe are the personality flags that a set-uid exec
	// clears (PER_CLEAR_ON_SETID); 0xffffffff only queries.
	personalityUnsafe = 0x0040000 | 0x0400000 | 0x0200000 | 0x0100000
	personalityQuery  = 0xffffffff
	// afVsock is the address family of socket and socketpair that the
	// filter denies.
	afVsock = unix.AF_VSOCK
)

// Classic BPF opcodes and the offsets of seccomp_data's fields (the low
// half of an argument on a little-endian machine, which both are).
const (
	bpfLdAbs   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeq     = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJge     = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfJset    = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	bpfRet     = unix.BPF_RET | unix.BPF_K
	offNr      = 0
	offArch    = 4
	offArg0    = 16
	retAllow   = unix.SECCOMP_RET_ALLOW
	retKill    = unix.SECCOMP_RET_KILL_PROCESS
	retEPERM   = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS  = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	labelNone  = ""
	labelEPERM = "eperm"
)

// insn is one BPF instruction whose jump targets are labels, resolved by
// assemble.
type insn struct {
	label  string // the label of this instruction, if any
	code   uint16
	jt, jf string // targets when true, false; "" is the next instruction
	k      uint32
}

// seccompFilter returns the filter for the machine, as bwrap's --seccomp
// and seccomp(2) take it: an array of struct sock_filter. Its error names
// what New misses.
func seccompFilter() ([]byte, error) {
	if machine == nil {
		return nil, fmt.Errorf("an amd64 or arm64 host (the seccomp filter knows no other architecture)")
	}
	b, err := assemble(program(machine))
	if err != nil {
		return nil, fmt.Errorf("a valid seccomp filter (%v)", err)
	}
	return b, nil
}

// program is the filter for m, before assembly.
func program(m *machineABI) []insn {
	p := []insn{
		{code: bpfLdAbs, k: offArch},
		{code: bpfJeq, k: m.audit, jt: "nr", jf: "kill"},
		{label: "nr", code: bpfLdAbs, k: offNr},
		{code: bpfJge, k: m.maxNr, jt: "kill"},
		{code: bpfJeq, k: sysClone, jt: "clone"},
		{code: bpfJeq, k: sysUnshare, jt: "unshare"},
		{code: bpfJeq, k: sysPersonality, jt: "personality"},
		{code: bpfJeq, k: sysClone3, jt: "enosys"},
		{code: bpfJeq, k: sysSocket, jt: "socket"},
		{code: bpfJeq, k: sysSocketpair, jt: "socket"},
	}
	for _, nr := range slices.Concat(deniedSyscalls, m.extra) {
		p = append(p, insn{code: bpfJeq, k: nr, jt: labelEPERM})
	}
	return append(p,
		insn{code: bpfRet, k: retAllow},
		insn{label: "clone", code: bpfLdAbs, k: offArg0},
		insn{code: bpfJset, k: cloneNamespaces, jt: labelEPERM},
		insn{code: bpfRet, k: retAllow},
		insn{label: "unshare", code: bpfLdAbs, k: offArg0},
		insn{code: bpfJset, k: unshareNamespaces, jt: labelEPERM},
		insn{code: bpfRet, k: retAllow},
		insn{label: "personality", code: bpfLdAbs, k: offArg0},
		insn{code: bpfJeq, k: personalityQuery, jt: "personality-allow"},
		insn{code: bpfJset, k: personalityUnsafe, jt: labelEPERM},
		insn{label: "personality-allow", code: bpfRet, k: retAllow},
		insn{label: "socket", code: bpfLdAbs, k: offArg0},
		insn{code: bpfJeq, k: afVsock, jt: labelEPERM},
		insn{code: bpfRet, k: retAllow},
		insn{label: labelEPERM, code: bpfRet, k: retEPERM},
		insn{label: "enosys", code: bpfRet, k: retENOSYS},
		insn{label: "kill", code: bpfRet, k: retKill},
	)
}

// assemble resolves the labels of p and encodes it. Jumps go forward only
// and at most 255 instructions, as in classic BPF.
func assemble(p []insn) ([]byte, error) {
	at := make(map[string]int)
	for i, in := range p {
		if in.label != labelNone {
			if _, dup := at[in.label]; dup {
				return nil, fmt.Errorf("seccomp filter: label %s twice", in.label)
			}
			at[in.label] = i
		}
	}
	offset := func(i int, label string) (uint8, error) {
		if label == labelNone {
			return 0, nil
		}
		j, ok := at[label]
		if !ok || j <= i || j-i-1 > 255 {
			return 0, fmt.Errorf("seccomp filter: instruction %d cannot jump to %s", i, label)
		}
		return uint8(j - i - 1), nil
	}
	b := make([]byte, 0, 8*len(p))
	for i, in := range p {
		jt, err := offset(i, in.jt)
		if err != nil {
			return nil, err
		}
		jf, err := offset(i, in.jf)
		if err != nil {
			return nil, err
		}
		if in.code&0x07 != unix.BPF_JMP && (jt != 0 || jf != 0) {
			return nil, fmt.Errorf("seccomp filter: instruction %d is not a jump", i)
		}
		b = binary.LittleEndian.AppendUint16(b, in.code)
		b = append(b, jt, jf)
		b = binary.LittleEndian.AppendUint32(b, in.k)
	}
	return b, nil
}

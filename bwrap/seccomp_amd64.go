package bwrap

import "golang.org/x/sys/unix"

// machine is x86_64. Numbers from 0x40000000 up (__X32_SYSCALL_BIT) are
// the x32 ABI's, which shares the arch value: they kill like i386's.
var machine = &machineABI{
	audit: unix.AUDIT_ARCH_X86_64,
	maxNr: 0x40000000,
	extra: []uint32{unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_USELIB},
}

package bwrap

import "golang.org/x/sys/unix"

// machine is aarch64. A 32-bit (AArch32) program has another arch value.
var machine = &machineABI{
	audit: unix.AUDIT_ARCH_AARCH64,
	maxNr: 0x40000000,
}

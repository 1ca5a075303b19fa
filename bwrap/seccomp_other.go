//go:build !amd64 && !arm64

package bwrap

// machine is nil: the filter knows only x86_64 and aarch64, and New
// refuses to run sandboxes unfiltered.
var machine *machineABI

var (
	deniedSyscalls []uint32
	enterSyscalls  syscallNumbers
)

const sysClone, sysClone3, sysUnshare, sysPersonality, sysSocket, sysSocketpair = 0, 0, 0, 0, 0, 0

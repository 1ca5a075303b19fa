package bwrap_test

import (
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/providertest"
	"github.com/bothyhq/bothy/testenv"
)

// TestProvider_Seccomp checks the filter from inside a sandbox, in
// commands entered after Start: the sandbox's pid 1 has it from bwrap,
// but commands are not its children and get it from the enter program.
func TestProvider_Seccomp(t *testing.T) {
	p := newProvider(t)
	h, _ := providertest.Start(t, p, bothy.LeaseSpec{})
	run := func(t *testing.T, script string) (int, string, string) {
		t.Helper()
		res, out, errOut := providertest.Exec(t, p, h, bothy.ExecSpec{Script: script, Timeout: 20 * time.Second})
		return res.ExitCode, out, errOut
	}

	t.Run("Filtered", func(t *testing.T) {
		// Mode 2 is a filter; the command has exactly one, and so do the
		// sandbox's init and a process the command starts.
		code, out, _ := run(t, "grep -h '^Seccomp' /proc/self/status /proc/1/status; (grep -h '^Seccomp' /proc/self/status &); wait")
		want := strings.Repeat("Seccomp:\t2\nSeccomp_filters:\t1\n", 3)
		if code != 0 || out != want {
			t.Fatalf("seccomp status %q (exit %d), want %q", out, code, want)
		}
	})
	t.Run("ErrDenied", func(t *testing.T) {
		// Each call, made with arguments that the kernel itself would
		// accept or refuse with another error than EPERM (the comment), so
		// that EPERM means the filter.
		calls := []struct {
			name string
			nr   uintptr
			args string
		}{
			{"keyctl", unix.SYS_KEYCTL, "0, -3, 0"},                               // KEYCTL_GET_KEYRING_ID of the session keyring: works
			{"setns", unix.SYS_SETNS, "0, 0"},                                     // stdin is no namespace: EINVAL
			{"ptrace", unix.SYS_PTRACE, "0, 0, 0, 0"},                             // PTRACE_TRACEME: works
			{"process_vm_readv", unix.SYS_PROCESS_VM_READV, "$$, 0, 0, 0, 0, 0"},  // nothing to read: 0
			{"io_uring_setup", unix.SYS_IO_URING_SETUP, "1, 0"},                   // no params: EFAULT
			{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT, "-100, 0, 0, 0, 0"}, // no path: EFAULT
			{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, "0, 0, -1, -1, 0"},      // no attr: EFAULT
			{"unshare", unix.SYS_UNSHARE, fmt.Sprint(unix.CLONE_NEWUSER)},         // works
			{"clone", unix.SYS_CLONE, fmt.Sprint(unix.CLONE_NEWUSER | int(unix.SIGCHLD))},
			{"personality", unix.SYS_PERSONALITY, "0x0040000"},                                                      // ADDR_NO_RANDOMIZE: works
			{"mount", unix.SYS_MOUNT, "0, 0, 0, 0, 0"},                                                              // EPERM too, for want of CAP_SYS_ADMIN
			{"socket_vsock", unix.SYS_SOCKET, fmt.Sprintf("%d, %d, 0", unix.AF_VSOCK, unix.SOCK_STREAM)},            // works
			{"socketpair_vsock", unix.SYS_SOCKETPAIR, fmt.Sprintf("%d, %d, 0, 0", unix.AF_VSOCK, unix.SOCK_STREAM)}, // no sv: EFAULT
		}
		for _, c := range calls {
			t.Run(c.name, func(t *testing.T) {
				script := fmt.Sprintf(`perl -e '$r = syscall(%d, %s); print $r == -1 ? ($!{EPERM} ? "EPERM" : "errno " . ($! + 0)) : "ok $r"'`, c.nr, c.args)
				code, out, errOut := run(t, script)
				if code != 0 || out != "EPERM" {
					t.Fatalf("%s: %q %q (exit %d), want EPERM", c.name, out, errOut, code)
				}
			})
		}
	})
	t.Run("OtherSocketFamilies", func(t *testing.T) {
		// Only AF_VSOCK is denied: a Unix, IPv4 or IPv6 socket opens
		// (without network, the sandbox still has its loopback).
		script := fmt.Sprintf(`perl -e 'for $f (%d, %d, %d) { print syscall(%d, $f, %d, 0) >= 0 ? "ok " : "errno " . ($! + 0) . " " }'`,
			unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.SYS_SOCKET, unix.SOCK_STREAM)
		code, out, errOut := run(t, script)
		if code != 0 || out != "ok ok ok " {
			t.Fatalf("sockets: %q %q (exit %d), want three", out, errOut, code)
		}
	})
	t.Run("Clone3ENOSYS", func(t *testing.T) {
		// glibc then falls back to clone, whose flags the filter sees.
		code, out, _ := run(t, fmt.Sprintf(`perl -e '$r = syscall(%d, 0, 0); print $!{ENOSYS} ? "ENOSYS" : "$r $!"'`, unix.SYS_CLONE3))
		if code != 0 || out != "ENOSYS" {
			t.Fatalf("clone3: %q (exit %d), want ENOSYS", out, code)
		}
	})
	t.Run("ErrUnshareUser", func(t *testing.T) {
		code, _, errOut := run(t, "unshare -U true")
		if code == 0 || !strings.Contains(errOut, "Operation not permitted") {
			t.Fatalf("unshare -U: exit %d, stderr %q; want EPERM", code, errOut)
		}
	})
	t.Run("ErrMount", func(t *testing.T) {
		code, _, _ := run(t, "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m")
		if code == 0 {
			t.Fatal("mount worked in the sandbox")
		}
	})
	t.Run("ErrNoRandomize", func(t *testing.T) {
		code, out, errOut := run(t, "setarch $(uname -m) true && echo plain; setarch $(uname -m) -R true && echo norandom; exit 0")
		if code != 0 || out != "plain\n" {
			t.Fatalf("setarch: %q %q (exit %d), want only the plain personality to work", out, errOut, code)
		}
	})
	t.Run("ForeignABIKilled", func(t *testing.T) {
		if runtime.GOARCH != "amd64" {
			testenv.NotApplicable(t, "x32 is an x86_64 ABI")
		}
		// getpid through the x32 ABI: SIGSYS (31), not a return.
		code, out, _ := run(t, fmt.Sprintf(`perl -e 'syscall(%d); print "returned"'; echo " $?"`, 0x40000000+unix.SYS_GETPID))
		if code != 0 || out != " 159\n" {
			t.Fatalf("x32 getpid: %q, want killed by SIGSYS (status 159)", out)
		}
	})
	t.Run("OrdinaryWork", func(t *testing.T) {
		gitLog := "git init -q && git -c user.name=b -c user.email=b@b commit -q --allow-empty -m one && git log --format=%s"
		if _, err := exec.LookPath("git"); err != nil {
			gitLog = "echo one" // the sandbox's /usr is the host's
		}
		script := `set -e
seq 1000 | sort -rn | head -1
perl -Mthreads -e 'print threads->create(sub { 40 + 2 })->join, "\n"'
sleep 30 & kill $! && wait $! || echo background ended
mkdir -p /tmp/r && cd /tmp/r
` + gitLog
		code, out, errOut := run(t, script)
		if want := "1000\n42\nbackground ended\none\n"; code != 0 || out != want {
			t.Fatalf("stdout %q stderr %q (exit %d), want %q", out, errOut, code, want)
		}
	})
}

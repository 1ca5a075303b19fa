package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// inheritable opens a file on descriptor fd without close-on-exec, as a
// descriptor this process inherited would be, and returns fd.
func inheritable(t *testing.T, fd int) int {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tmp)
	if err := unix.Dup3(tmp, fd, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func closeOnExec(t *testing.T, fd int) bool {
	t.Helper()
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		t.Fatal(err)
	}
	return flags&unix.FD_CLOEXEC != 0
}

// TestCloseInheritedOnExec: both ways (close_range and the walk of
// /proc/self/fd) mark the descriptors above 2 close-on-exec, so that a
// child started by os/exec has standard input, output and error and its
// ExtraFiles only.
func TestCloseInheritedOnExec(t *testing.T) {
	for name, mark := range map[string]func() error{"CloseRange": CloseInheritedOnExec, "Proc": closeOnExecByProc} {
		t.Run(name, func(t *testing.T) {
			fds := []int{inheritable(t, 20), inheritable(t, 78), inheritable(t, 251)}
			if closeOnExec(t, 78) {
				t.Fatal("the descriptor is close-on-exec before")
			}
			if err := mark(); err != nil {
				t.Fatal(err)
			}
			for _, fd := range fds {
				if !closeOnExec(t, fd) {
					t.Errorf("descriptor %d is not close-on-exec", fd)
				}
			}
			for fd := range 3 {
				if closeOnExec(t, fd) {
					t.Errorf("descriptor %d is close-on-exec", fd)
				}
			}
			extra, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			defer extra.Close()
			cmd := exec.Command("/bin/sh", "-c", `for f in /proc/self/fd/*; do [ -L "$f" ] && printf '%s\n' "${f##*/}"; done; true`)
			cmd.ExtraFiles = []*os.File{extra}
			out, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			// The glob's own descriptor is closed by the time of the test.
			if got, want := strings.Fields(string(out)), []string{"0", "1", "2", "3"}; !slices.Equal(got, want) {
				t.Errorf("the child has descriptors %v, want %v (its ExtraFiles are 3)", got, want)
			}
		})
	}
}

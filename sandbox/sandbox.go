// Package sandbox is the host plumbing that bothy's providers share. Every
// provider runs a command through Run (its output, input, timeout, kill and
// memory samples), builds its environment with Environ and gives it secret
// files with SecretFiles. The isolating providers (bwrap, gvisor) also
// share what surrounds a sandbox on the host: the checks of their New
// (Needs), a lease's state directory and uid (Leases), the sandbox's pid 1
// (InitProgram), the environment inside (Inside), the commands they run as
// root (Command), mounts and random names.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/mountinfo"
)

// Needs collects what a provider's New finds missing on the host, for one
// error that names all of it.
type Needs struct {
	missing []string
}

// Add notes that each of what is missing.
func (n *Needs) Add(what ...string) { n.missing = append(n.missing, what...) }

// Root notes that root is missing, for the reason why, unless the process
// runs as root.
func (n *Needs) Root(why string) {
	if os.Geteuid() != 0 {
		n.Add("root (" + why + ")")
	}
}

// Program resolves *prog on PATH, or name if *prog is empty, and stores its
// path in *prog; it notes the program as missing if it is not found.
func (n *Needs) Program(prog *string, name string) {
	if *prog == "" {
		*prog = name
	}
	path, err := exec.LookPath(*prog)
	if err != nil {
		n.Add(fmt.Sprintf("the %s program (install it with scripts/sandbox-deps)", name))
		return
	}
	*prog = path
}

// Files notes each of paths that does not exist.
func (n *Needs) Files(paths ...string) {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			n.Add(p)
		}
	}
}

// Met reports whether nothing is missing yet.
func (n *Needs) Met() bool { return len(n.missing) == 0 }

// Err returns an error naming everything missing for the provider, or nil.
func (n *Needs) Err(provider string) error {
	if n.Met() {
		return nil
	}
	return fmt.Errorf("%s provider needs %s", provider, strings.Join(n.missing, "; "))
}

// CheckNetNS checks that a lease's network namespace (LeaseSpec.NetNS),
// if it has one, is a namespace, which nsenter can join: the providers'
// Start refuses anything else with EINVALID.
func CheckNetNS(path string) error {
	if path == "" {
		return nil
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil || fs.Type != unix.NSFS_MAGIC {
		return bothy.Errorf(bothy.EINVALID, "lease network namespace %s is not a namespace", path)
	}
	return nil
}

// HostPath is the PATH of the commands that a provider runs on the host.
const HostPath = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"

// Command returns a command that a provider runs on the host, as root,
// with only HostPath in its environment (not the agent's, which may hold
// its credential), / as its directory and a session of its own: nothing
// runs in the agent's session, so a command cannot reach its terminal and
// the agent's job control never signals a command.
func Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = []string{HostPath}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd
}

// Exists reports whether path exists; a final symlink is not followed.
func Exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// Mounted reports whether path is a mount point in this mount namespace.
func Mounted(path string) bool {
	ok, err := mountinfo.Mounted(path)
	return err == nil && ok
}

// MountsUnder returns the mount points at or below dir.
func MountsUnder(dir string) []string {
	ms, err := mountinfo.Read()
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range ms {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			out = append(out, m.Point)
		}
	}
	return out
}

// RandomHex returns n random bytes in hexadecimal, for names on the host.
func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

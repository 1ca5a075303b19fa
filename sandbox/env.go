package sandbox

import (
	"fmt"
	"maps"
	"slices"
)

// Inside returns the base environment of a command in a sandbox, whose
// workspace is /workspace and whose user is named bothy.
func Inside() map[string]string {
	return map[string]string{
		"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
		"HOME": "/workspace",
		"LANG": "C.UTF-8",
		"USER": "bothy",
	}
}

// Environ returns a command's environment as NAME=value pairs sorted by
// name: base, then each of layers (the lease's variables, the command's),
// a later one overriding an earlier. A command never gets the agent's own
// environment, which may hold its credential.
func Environ(base map[string]string, layers ...map[string]string) []string {
	env := maps.Clone(base)
	for _, l := range layers {
		maps.Copy(env, l)
	}
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// InitProgram returns the perl program of a sandbox's pid 1: it reaps the
// orphans that commands leave and otherwise sleeps. A process of the
// sandbox cannot kill it: the kernel, and gVisor's, drops the signals that
// a pid namespace's init has no handler for when they come from inside.
// With readyFD above 0, it first writes "ready\n" to that descriptor and
// closes it, to tell the provider that the sandbox is set up.
func InitProgram(readyFD int) string {
	prog := `$0 = "bothy-init"; $SIG{CHLD} = sub {};` + "\n"
	if readyFD > 0 {
		prog += fmt.Sprintf(`open(my $ready, ">&=", %d) or die "bothy-init: fd %d: $!"; print $ready "ready\n"; close $ready;`, readyFD, readyFD) + "\n"
	}
	return prog + `while (1) { 1 while waitpid(-1, 1) > 0; sleep 3600 }`
}

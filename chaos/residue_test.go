package chaos_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy/mountinfo"
)

// observe records the leases under n's data directory and the host paths
// their records (lease.json, the provider's handle) name by the lease's
// id: cgroups, the provider's state directory. checkNoResidue looks for
// each once the trial is over.
func (n *node) observe() {
	dir := filepath.Join(n.data, "agent", "leases")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name(), "lease.json"))
		paths := pathsNamed(b, e.Name())
		n.mu.Lock()
		n.leases[e.Name()] = append(n.leases[e.Name()], paths...)
		n.mu.Unlock()
	}
}

// pathsNamed returns the strings of the JSON document b that are absolute
// paths whose last element is lease.
func pathsNamed(b []byte, lease string) []string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			if p := filepath.Clean(v); filepath.IsAbs(v) && filepath.Base(p) == lease && strings.Count(p, "/") > 1 {
				out = append(out, p)
			}
		case map[string]any:
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return out
}

// checkNoResidue fails if anything of data is left on the host once its
// serve has stopped: a lease directory, a process (one whose command line,
// environment, working directory or root names data, or that runs in a
// cgroup of one of its leases), a mount, a cgroup or directory that a
// lease's record named, or a network namespace of one of its leases.
// keep names the test's own mounts (a tmpfs under data), which are not
// residue.
func checkNoResidue(t *testing.T, data string, leases map[string][]string, keep []string) {
	t.Helper()
	if ents, err := os.ReadDir(filepath.Join(data, "agent", "leases")); err == nil && len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("lease directories left under %s: %v", data, names)
	}
	// A process killed a moment ago may still be exiting.
	var pids []int
	for range 50 {
		if pids = residuePids(data, leases); len(pids) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, pid := range pids {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		t.Errorf("process left: %d %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
	}
	for _, m := range mountsOf(data, leases) {
		if !slices.Contains(keep, m) {
			t.Errorf("mount left: %s", m)
		}
	}
	for id, paths := range leases {
		for _, p := range paths {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("lease %s left %s", id, p)
			}
		}
		if _, err := os.Lstat("/run/netns/bothy-" + id); err == nil {
			t.Errorf("lease %s left its network namespace bothy-%s", id, id)
		}
	}
}

// residuePids returns the live processes that belong to data or its leases.
func residuePids(data string, leases map[string][]string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || pid == 1 || !alive(pid) {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		environ, _ := os.ReadFile(filepath.Join(dir, "environ"))
		cwd, _ := os.Readlink(filepath.Join(dir, "cwd"))
		root, _ := os.Readlink(filepath.Join(dir, "root"))
		cg, _ := os.ReadFile(filepath.Join(dir, "cgroup"))
		mine := names(cmdline, data) || names(environ, data) || under(cwd, data) || under(root, data)
		for _, line := range strings.Split(string(cg), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			for _, c := range strings.Split(parts[2], "/") {
				_, ok := leases[c]
				mine = mine || (c != "" && ok)
			}
		}
		if mine {
			out = append(out, pid)
		}
	}
	return out
}

// alive reports whether pid runs and is no zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// names reports whether the NUL-separated list b holds data or a path under
// it, never a longer name that begins with it.
func names(b []byte, data string) bool {
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(data))
		if j < 0 {
			return false
		}
		end := i + j + len(data)
		if end == len(b) || b[end] == '/' || b[end] == 0 {
			return true
		}
		i = i + j + 1
	}
}

// under reports whether path is dir or under it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// mountsOf returns the mount points under data or a directory a lease's
// record named, or whose source or options name data (an overlay of a
// lease's layers), deepest first. data itself (a tmpfs the test mounted)
// is not one.
func mountsOf(data string, leases map[string][]string) []string {
	roots := []string{data}
	for _, paths := range leases {
		for _, p := range paths {
			if !strings.HasPrefix(p, "/sys/") {
				roots = append(roots, p)
			}
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := mountinfo.Unescape(f[4])
		if mp == data {
			continue
		}
		mine := false
		for _, r := range roots {
			mine = mine || under(mp, r)
		}
		if _, after, ok := strings.Cut(line, " - "); ok {
			for _, w := range strings.FieldsFunc(after, func(r rune) bool { return r == ' ' || r == ',' || r == '=' || r == ':' }) {
				mine = mine || under(mountinfo.Unescape(w), data)
			}
		}
		if mine {
			out = append(out, mp)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out
}

// removeResidue stops what a failed trial left of data (what
// checkNoResidue looks for), so that it does not burden the tests after
// it, and returns how many things it stopped. It touches nothing that data
// or its leases do not name.
func removeResidue(data string, leases map[string][]string, keep []string) int {
	data = filepath.Clean(data)
	if data == "/" || !filepath.IsAbs(data) {
		return 0
	}
	k := 0
	for pass := 0; pass < 20; pass++ {
		pids := residuePids(data, leases)
		if len(pids) == 0 {
			break
		}
		if pass == 0 {
			k += len(pids)
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, m := range mountsOf(data, leases) {
		if !slices.Contains(keep, m) && syscall.Unmount(m, syscall.MNT_DETACH) == nil {
			k++
		}
	}
	for id, paths := range leases {
		for _, p := range paths {
			if strings.HasPrefix(p, "/sys/fs/cgroup/") {
				k += removeCgroup(p)
			} else if !strings.HasPrefix(p, "/sys/") && !strings.HasPrefix(p, "/proc/") && len(mountsOf(p, nil)) == 0 && os.RemoveAll(p) == nil {
				k++
			}
		}
		if _, err := os.Lstat("/run/netns/bothy-" + id); err == nil {
			syscall.Unmount("/run/netns/bothy-"+id, syscall.MNT_DETACH)
			os.Remove("/run/netns/bothy-" + id)
			k++
		}
	}
	return k
}

// removeCgroup removes dir and the cgroups under it, deepest first.
func removeCgroup(dir string) int {
	k := 0
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			k += removeCgroup(filepath.Join(dir, e.Name()))
		}
	}
	if syscall.Rmdir(dir) == nil {
		k++
	}
	return k
}

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy/mountinfo"
)

// cleanupOnFailure registers a cleanup that, if the test failed, stops
// what its leases left under data: the processes that name data (the
// supervisors, whose -dir is a lease directory of data, and the bwrap
// sandboxes, whose workspace bind is one) or run in it, the processes of
// the cgroups that data's lease.json files name, those cgroups, and the
// mounts under data. A passing test checks that it left nothing
// (checkNoResidue); a failing one stops before its own checks, and would
// leave its leases running for the tests after it. It touches nothing
// that data does not name.
func cleanupOnFailure(t *testing.T, data string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if n := removeResidue(data); n > 0 {
			t.Logf("the failed test left %d things under %s; stopped them", n, data)
		}
	})
}

// removeResidue stops what belongs to data (see cleanupOnFailure) and
// returns how many processes, cgroups and mounts it found.
func removeResidue(data string) int {
	data = filepath.Clean(data)
	if data == "/" || !filepath.IsAbs(data) {
		return 0
	}
	leases, cgroups, dirs := leaseRefs(data)
	n := 0
	for pass := 0; pass < 20; pass++ {
		pids := residuePids(data, leases)
		if len(pids) == 0 {
			break
		}
		if pass == 0 {
			n += len(pids)
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, dir := range cgroups {
		n += removeCgroup(dir)
	}
	roots := append([]string{data}, dirs...)
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, m := range mountsOf(roots, data, string(mi)) {
		if syscall.Unmount(m, syscall.MNT_DETACH) == nil {
			n++
		}
	}
	// A provider's state directory of a lease, once nothing is mounted
	// under it.
	mi, _ = os.ReadFile("/proc/self/mountinfo")
	for _, dir := range dirs {
		if len(mountsOf([]string{dir}, data, string(mi))) == 0 && os.RemoveAll(dir) == nil {
			n++
		}
	}
	return n
}

// removeCgroup removes dir and the cgroups under it, deepest first, and
// returns how many it removed.
func removeCgroup(dir string) int {
	n := 0
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			n += removeCgroup(filepath.Join(dir, e.Name()))
		}
	}
	if syscall.Rmdir(dir) == nil {
		n++
	}
	return n
}

// leaseRefs returns the IDs of data's leases (their directories under
// agent/leases) and what their lease.json files name (in the provider
// handle) that is named by the lease's ID: cgroup directories under
// /sys/fs/cgroup, and other directories outside data (a provider's state
// directory of the lease). A provider names its lease's cgroups and
// directories by the lease's ID.
func leaseRefs(data string) (leases, cgroups, dirs []string) {
	ents, _ := os.ReadDir(filepath.Join(data, "agent", "leases"))
	for _, d := range ents {
		if !d.IsDir() {
			continue
		}
		leases = append(leases, d.Name())
		b, err := os.ReadFile(filepath.Join(data, "agent", "leases", d.Name(), "lease.json"))
		if err != nil {
			continue
		}
		for _, p := range pathsNamed(b, d.Name()) {
			if strings.HasPrefix(p, "/sys/fs/cgroup/") {
				cgroups = append(cgroups, p)
			} else if !under(p, data) && !strings.HasPrefix(p, "/proc/") && !strings.HasPrefix(p, "/sys/") {
				dirs = append(dirs, p)
			}
		}
	}
	return leases, cgroups, dirs
}

// pathsNamed returns the strings of the JSON document b that are absolute
// paths whose last element is lease.
func pathsNamed(b []byte, lease string) []string {
	var v any
	if json.Unmarshal(b, &v) != nil || lease == "" {
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
	sort.Strings(out)
	return out
}

// residuePids returns the processes that belong to data or its leases
// (procInfo.belongsTo).
func residuePids(data string, leases []string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || pid == 1 {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		var p procInfo
		p.cmdline, _ = os.ReadFile(filepath.Join(dir, "cmdline"))
		p.environ, _ = os.ReadFile(filepath.Join(dir, "environ"))
		p.cwd, _ = os.Readlink(filepath.Join(dir, "cwd"))
		p.root, _ = os.Readlink(filepath.Join(dir, "root"))
		cg, _ := os.ReadFile(filepath.Join(dir, "cgroup"))
		p.cgroup = string(cg)
		if p.belongsTo(data, leases) {
			out = append(out, pid)
		}
	}
	return out
}

// procInfo is what residuePids reads of a process in /proc.
type procInfo struct {
	cmdline, environ []byte // NUL-separated
	cwd, root        string
	cgroup           string // /proc/PID/cgroup
}

// belongsTo reports whether the process belongs to data: its command line
// or environment names data or a path under it (a supervisor's -dir, a
// bwrap sandbox's workspace bind), its working directory or root is
// under data, or it is in a cgroup of one of data's leases (a cgroup path
// with a component that is the lease's ID: the sandbox's processes).
func (p procInfo) belongsTo(data string, leases []string) bool {
	if names(p.cmdline, data) || names(p.environ, data) || under(p.cwd, data) || under(p.root, data) {
		return true
	}
	for _, line := range strings.Split(p.cgroup, "\n") {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[2], "/") {
			for _, l := range leases {
				if c != "" && c == l {
					return true
				}
			}
		}
	}
	return false
}

// names reports whether the NUL-separated list b holds data or a path
// under it: data followed by "/", a NUL or the end, never a longer name
// that begins with it.
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

// under reports whether path is data or under it.
func under(path, data string) bool {
	return path == data || strings.HasPrefix(path, data+"/")
}

// mountsOf returns the mount points in the mountinfo text that are under
// one of roots, or whose source or options name data (an overlay of a
// lease's layers), deepest first.
func mountsOf(roots []string, data, text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := mountinfo.Unescape(f[4])
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

// TestResidueOfData checks what removeResidue takes to belong to a data
// directory, on made-up /proc and mountinfo contents: only what names
// the directory itself, never a sibling whose name begins with it.
func TestResidueOfData(t *testing.T) {
	const data = "/tmp/TestE2E_X/001"
	leases := []string{"lease_abc"}
	nul := func(s ...string) []byte { return []byte(strings.Join(s, "\x00") + "\x00") }
	for _, c := range []struct {
		name string
		p    procInfo
		want bool
	}{
		{"supervisor", procInfo{cmdline: nul("/tmp/b/bothy-supervisor", "-dir", data+"/agent/leases/lease_abc/supervisor")}, true},
		{"bwrap", procInfo{cmdline: nul("bwrap", "--bind", data+"/agent/leases/lease_abc/merged", "/workspace")}, true},
		{"server", procInfo{cmdline: nul("bothy", "serve", "--data", data)}, true},
		{"environment", procInfo{environ: nul("HOME=/root", "BOTHY_DATA="+data)}, true},
		{"cwd", procInfo{cwd: data + "/agent"}, true},
		{"root", procInfo{root: data + "/agent/leases/lease_abc/merged"}, true},
		{"sandboxed", procInfo{cgroup: "5:memory:/bothy/lease_abc/cmd-1\n0::/\n"}, true},
		{"sibling", procInfo{cmdline: nul("bothy", "serve", "--data", data+"0"), cwd: data + "0/agent", environ: nul("X=" + data + "1")}, false},
		{"parent", procInfo{cmdline: nul("go", "test", "/tmp/TestE2E_X"), cwd: "/tmp/TestE2E_X", root: "/"}, false},
		{"other lease", procInfo{cgroup: "5:memory:/bothy/lease_abcd\n3:pids:/lease_ab/x\n"}, false},
		{"host", procInfo{cmdline: nul("/sbin/init"), cwd: "/", root: "/", cgroup: "0::/\n1:name=systemd:/init.scope\n"}, false},
	} {
		if got := c.p.belongsTo(data, leases); got != c.want {
			t.Errorf("%s: belongsTo = %v, want %v", c.name, got, c.want)
		}
	}

	mi := strings.Join([]string{
		"22 1 0:21 / / rw - ext4 /dev/sda1 rw",
		"40 22 0:40 / " + data + "/agent/leases/lease_abc/merged rw - overlay overlay rw",
		"41 40 0:41 / " + data + "/agent/leases/lease_abc/merged/sub\\040dir rw - tmpfs tmpfs rw",
		"42 22 0:42 / " + data + "0/agent/leases/lease_x/merged rw - overlay overlay rw",
		"43 22 0:43 / /tmp/TestE2E_X rw - tmpfs tmpfs rw",
	}, "\n")
	want := []string{data + "/agent/leases/lease_abc/merged/sub dir", data + "/agent/leases/lease_abc/merged"}
	if got := mountsOf([]string{data}, data, mi); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("mountsOf = %q, want %q", got, want)
	}

	handle := `{"lease_id":"lease_abc","handle":{"provider":"bwrap","state":{"uid":100000,"cgroups":{"v1":{"memory":"/sys/fs/cgroup/memory/bothy/lease_abc","pids":"/sys/fs/cgroup/pids/bothy/lease_abc"},"unified":"/sys/fs/cgroup/unified/bothy/lease_abc"},"dir":"/run/bothy/bwrap/leases/lease_abc","parent":"/sys/fs/cgroup/memory/bothy","other":"/sys/fs/cgroup/memory/bothy/lease_abcd"}}}`
	wantPaths := []string{"/run/bothy/bwrap/leases/lease_abc", "/sys/fs/cgroup/memory/bothy/lease_abc", "/sys/fs/cgroup/pids/bothy/lease_abc", "/sys/fs/cgroup/unified/bothy/lease_abc"}
	if got := pathsNamed([]byte(handle), "lease_abc"); strings.Join(got, "|") != strings.Join(wantPaths, "|") {
		t.Errorf("pathsNamed = %q, want %q", got, wantPaths)
	}

	// An overlay elsewhere whose layers are data's, and one whose are a
	// sibling's.
	mi = strings.Join([]string{
		"50 27 0:40 / /run/bothy/bwrap/leases/lease_abc/workspace rw - overlay overlay rw,lowerdir=" + data + "/agent/leases/lease_abc/ws/lower,upperdir=" + data + "/agent/leases/lease_abc/ws/upper",
		"51 27 0:41 / /run/bothy/bwrap/leases/lease_x/workspace rw - overlay overlay rw,lowerdir=" + data + "0/agent/leases/lease_x/ws/lower",
		"52 27 0:42 / /run/bothy/bwrap/leases/lease_abc/root rw - tmpfs tmpfs rw",
	}, "\n")
	want = []string{"/run/bothy/bwrap/leases/lease_abc/workspace", "/run/bothy/bwrap/leases/lease_abc/root"}
	if got := mountsOf([]string{data, "/run/bothy/bwrap/leases/lease_abc"}, data, mi); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("mountsOf = %q, want %q", got, want)
	}
}

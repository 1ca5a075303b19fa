// Package mountinfo reads the mount table of this process's mount namespace
// from /proc/self/mountinfo.
package mountinfo

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of mountinfo.
type Mount struct {
	Point        string // the mount point
	FSType       string // e.g. "overlay", "ext4"
	Source       string
	SuperOptions string // per-superblock options, e.g. "rw,lowerdir=…"
}

// Option returns the value of a per-superblock option such as "lowerdir".
func (m *Mount) Option(name string) (string, bool) {
	for _, o := range strings.Split(m.SuperOptions, ",") {
		if v, ok := strings.CutPrefix(o, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// Read parses /proc/self/mountinfo.
func Read() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	var out []Mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m, ok := Parse(sc.Text()); ok {
			out = append(out, m)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return out, nil
}

// Parse parses one mountinfo line:
// id parent major:minor root point options [optional...] - fstype source super.
func Parse(line string) (Mount, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return Mount{}, false
	}
	a, b := strings.Fields(pre), strings.Fields(post)
	if len(a) < 5 || len(b) < 3 {
		return Mount{}, false
	}
	return Mount{Point: Unescape(a[4]), FSType: b[0], Source: Unescape(b[1]), SuperOptions: Unescape(b[2])}, true
}

// Mounted reports whether path is a mount point in this mount namespace.
func Mounted(path string) (bool, error) {
	mounts, err := Read()
	if err != nil {
		return false, err
	}
	for _, m := range mounts {
		if m.Point == path {
			return true, nil
		}
	}
	return false, nil
}

// Unescape undoes mountinfo's octal escapes (\040 for a space).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

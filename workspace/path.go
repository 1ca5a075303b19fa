package workspace

import (
	"strings"

	"github.com/bothyhq/bothy"
)

// Default path limits, as on Linux (PATH_MAX and NAME_MAX).
const (
	DefaultMaxPath = 4096
	DefaultMaxName = 255
)

// CleanPath returns the canonical form of a caller's workspace path, with
// the default limits: a relative slash path with no empty, "." or ".."
// element and no leading or trailing '/', and "." for the workspace root.
// "/a/b", "a/b" and "./a//b/" all give "a/b"; "", "/" and "." give ".".
//
// A ".." element is resolved lexically ("a/../b" is "b"), which never looks
// at symlinks, and a ".." that would climb above the root is EINVALIDPATH.
// So are NUL bytes, an element over 255 bytes and a path over 4096 bytes.
// Backslashes and all other bytes are ordinary name characters, as on Linux.
func CleanPath(p string) (string, error) {
	return cleanPath(p, DefaultMaxPath, DefaultMaxName)
}

func cleanPath(p string, maxPath, maxName int) (string, error) {
	if len(p) > maxPath {
		return "", bothy.Errorf(bothy.EINVALIDPATH, "path is over %d bytes", maxPath)
	} else if strings.IndexByte(p, 0) >= 0 {
		return "", bothy.Errorf(bothy.EINVALIDPATH, "path holds a NUL byte")
	}
	var out []string
	for elem := range strings.SplitSeq(p, "/") {
		switch {
		case elem == "" || elem == ".":
		case elem == "..":
			if len(out) == 0 {
				return "", bothy.Errorf(bothy.EINVALIDPATH, "path %q escapes the workspace root", p)
			}
			out = out[:len(out)-1]
		case len(elem) > maxName:
			return "", bothy.Errorf(bothy.EINVALIDPATH, "path %q has a name over %d bytes", p, maxName)
		default:
			out = append(out, elem)
		}
	}
	if len(out) == 0 {
		return ".", nil
	}
	return strings.Join(out, "/"), nil
}

// splitPath splits a clean path into its elements; the root has none.
func splitPath(p string) []string {
	if p == "." || p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// joinPath joins a clean directory path and a name.
func joinPath(dir, name string) string {
	if dir == "." || dir == "" {
		return name
	}
	return dir + "/" + name
}

// baseName returns the last element of a clean path ("." for the root).
func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

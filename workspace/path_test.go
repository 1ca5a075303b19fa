package workspace_test

import (
	"path"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/workspace"
)

func TestCleanPath(t *testing.T) {
	ok := []struct{ in, want string }{
		{"", "."},
		{"/", "."},
		{".", "."},
		{"./", "."},
		{"//", "."},
		{"a", "a"},
		{"/a/b", "a/b"},
		{"a/b", "a/b"},
		{"./a//b/", "a/b"},
		{"a/./b/.", "a/b"},
		{"a/../b", "b"},
		{"a/b/../../c", "c"},
		{"a/..", "."},
		{`a\b`, `a\b`},
		{`..\x`, `..\x`},
		{"...", "..."},
		{"..a/b..", "..a/b.."},
		{" a /b ", " a /b "},
		{strings.Repeat("x", 255), strings.Repeat("x", 255)},
	}
	for _, tt := range ok {
		got, err := workspace.CleanPath(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	bad := []string{
		"..",
		"../x",
		"/../x",
		"a/../../x",
		"./..",
		"a/b/../../../etc/passwd",
		"a\x00b",
		"\x00",
		strings.Repeat("x", 256),
		"a/" + strings.Repeat("x", 256) + "/..",
		strings.Repeat("a/", 2049),
	}
	for _, in := range bad {
		if got, err := workspace.CleanPath(in); bothy.ErrorCode(err) != bothy.EINVALIDPATH {
			t.Errorf("CleanPath(%.40q) = %q, %v; want EINVALIDPATH", in, got, err)
		}
	}
	// The escape message is clear.
	if _, err := workspace.CleanPath("../x"); !strings.Contains(bothy.ErrorMessage(err), "escapes the workspace") {
		t.Errorf("escape message = %q", bothy.ErrorMessage(err))
	}
}

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{
		"", "/", ".", "..", "../x", "a/../../x", "./a//b/", "a/./b/..", "/a/b/",
		"a\x00b", `a\..\b`, "....//..", "a/b/c/../../..", "a/b/c/../../../..",
		strings.Repeat("x", 256), strings.Repeat("../", 100), strings.Repeat("a/", 3000),
		"\xff\xfe/..", "%2e%2e/x", "a/.../b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := workspace.CleanPath(in)
		if err != nil {
			if bothy.ErrorCode(err) != bothy.EINVALIDPATH {
				t.Fatalf("CleanPath(%q): error code %q, want %q", in, bothy.ErrorCode(err), bothy.EINVALIDPATH)
			}
			return
		}
		if got == "" || strings.HasPrefix(got, "/") || strings.HasSuffix(got, "/") ||
			strings.Contains(got, "//") || strings.ContainsRune(got, 0) {
			t.Fatalf("CleanPath(%q) = %q: not canonical", in, got)
		}
		for _, elem := range strings.Split(got, "/") {
			if elem == ".." || (elem == "." && got != ".") || len(elem) > 255 {
				t.Fatalf("CleanPath(%q) = %q: bad element %q", in, got, elem)
			}
		}
		if len(got) > 4096 {
			t.Fatalf("CleanPath(%q) = %q: over 4096 bytes", in, got)
		}
		again, err := workspace.CleanPath(got)
		if err != nil || again != got {
			t.Fatalf("CleanPath(%q) = %q, but CleanPath(%q) = %q, %v", in, got, got, again, err)
		}
		if abs := path.Clean("/" + got); abs == "/.." || strings.HasPrefix(abs, "/../") {
			t.Fatalf("CleanPath(%q) = %q escapes the root: %q", in, got, abs)
		}
		if got != "." && path.Clean("/"+got) != "/"+got {
			t.Fatalf("CleanPath(%q) = %q is not path.Clean canonical", in, got)
		}
	})
}

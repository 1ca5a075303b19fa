package workspace_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/storetest"
	"github.com/bothyhq/bothy/workspace"
)

func TestFS_Glob(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		for _, p := range []string{"a.go", "b.txt", ".hidden.go", "src/x.go", "src/y.txt", "src/deep/er/z.go", "docs/README.md"} {
			e.write(p, p)
		}
		e.mkdir("src/emptydir")
		e.symlink("src", "srclink")
		glob := func(pattern string, limit int) string {
			t.Helper()
			list, err := e.fs.Glob(e.ctx, e.tenant, e.computer, pattern, limit)
			if err != nil {
				t.Fatalf("glob %q: %v", pattern, err)
			}
			var s []string
			for _, fi := range list {
				s = append(s, fi.Path)
			}
			return strings.Join(s, " ")
		}
		for _, tt := range []struct{ pattern, want string }{
			{"*.go", ".hidden.go a.go"},
			{"/src/*", "src/deep src/emptydir src/x.go src/y.txt"},
			{"**/*.go", ".hidden.go a.go src/deep/er/z.go src/x.go"},
			{"src/**/*.go", "src/deep/er/z.go src/x.go"},
			{"src/**", "src src/deep src/deep/er src/deep/er/z.go src/emptydir src/x.go src/y.txt"},
			{"**/er", "src/deep/er"},
			{"**/**/*.md", "docs/README.md"},
			{"*/*.[mt]*", "docs/README.md src/y.txt"},
			{"srclink/*", ""},
			{"srclink", "srclink"},
			{"nope/**", ""},
			{"a.go/*", ""},
		} {
			if got := glob(tt.pattern, 0); got != tt.want {
				t.Errorf("glob %q = %q, want %q", tt.pattern, got, tt.want)
			}
		}
		t.Run("Limit", func(t *testing.T) {
			if got := glob("**", 3); len(strings.Fields(got)) != 3 {
				t.Fatalf("limit 3 gave %q", got)
			}
		})
		t.Run("Info", func(t *testing.T) {
			list, err := e.fs.Glob(e.ctx, e.tenant, e.computer, "srclink", 0)
			if err != nil || list[0].Type != bothy.FileTypeSymlink || list[0].Target != "src" {
				t.Fatalf("glob info %+v, %v", list, err)
			}
		})
		t.Run("ErrPattern", func(t *testing.T) {
			_, err := e.fs.Glob(e.ctx, e.tenant, e.computer, "src/[", 0)
			storetest.WantCode(t, err, bothy.EINVALID)
			_, err = e.fs.Glob(e.ctx, e.tenant, e.computer, "*", -1)
			storetest.WantCode(t, err, bothy.EINVALID)
		})
	})
}

func TestFS_Grep(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		e.write("src/main.go", "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"Hello\")\n}\n")
		e.write("src/util.go", "package main\n// TODO: hello again\nfunc helper() {}")
		e.write("docs/notes.txt", "hello from the docs\nline two\n")
		e.write("bin/blob", "hello\x00binary")
		e.symlink("src", "srclink")
		grep := func(opts bothy.GrepOptions) *bothy.GrepResult {
			t.Helper()
			res, err := e.fs.Grep(e.ctx, e.tenant, e.computer, opts)
			if err != nil {
				t.Fatalf("grep %+v: %v", opts, err)
			}
			return res
		}
		where := func(res *bothy.GrepResult) string {
			var s []string
			for _, m := range res.Matches {
				s = append(s, fmt.Sprintf("%s:%d", m.Path, m.Line))
			}
			return strings.Join(s, " ")
		}
		t.Run("OK", func(t *testing.T) {
			res := grep(bothy.GrepOptions{Pattern: "[Hh]ello"})
			if got, want := where(res), "docs/notes.txt:1 src/main.go:6 src/util.go:2"; got != want || res.Truncated {
				t.Fatalf("grep = %s (truncated %v), want %s", got, res.Truncated, want)
			}
			if res.Matches[1].Text != "\tfmt.Println(\"Hello\")" {
				t.Fatalf("text %q", res.Matches[1].Text)
			}
		})
		t.Run("IgnoreCase", func(t *testing.T) {
			if got := where(grep(bothy.GrepOptions{Pattern: "HELLO", IgnoreCase: true, Path: "src"})); got != "src/main.go:6 src/util.go:2" {
				t.Fatalf("grep -i = %s", got)
			}
		})
		t.Run("Literal", func(t *testing.T) {
			if got := where(grep(bothy.GrepOptions{Pattern: "helper()", Literal: true})); got != "src/util.go:3" {
				t.Fatalf("grep -F = %s", got)
			}
			if got := where(grep(bothy.GrepOptions{Pattern: "(", Literal: true})); got != "src/main.go:5 src/main.go:6 src/util.go:3" {
				t.Fatalf("grep -F ( = %s", got)
			}
		})
		t.Run("Context", func(t *testing.T) {
			res := grep(bothy.GrepOptions{Pattern: "^import", Context: 2})
			m := res.Matches[0]
			if len(res.Matches) != 1 || m.Line != 3 ||
				strings.Join(m.Before, "|") != "package main|" || strings.Join(m.After, "|") != "|func main() {" {
				t.Fatalf("context %+v", res.Matches)
			}
			// Context is cut at the start and end of a file.
			res = grep(bothy.GrepOptions{Pattern: "two", Context: 5, Path: "docs"})
			if m := res.Matches[0]; strings.Join(m.Before, "|") != "hello from the docs" || len(m.After) != 0 {
				t.Fatalf("context at the ends %+v", m)
			}
		})
		t.Run("Limit", func(t *testing.T) {
			res := grep(bothy.GrepOptions{Pattern: "main", Limit: 2, Context: 1})
			if where(res) != "src/main.go:1 src/main.go:5" || !res.Truncated {
				t.Fatalf("limit: %s, truncated %v", where(res), res.Truncated)
			}
			if m := res.Matches[1]; strings.Join(m.After, "|") != "\tfmt.Println(\"Hello\")" {
				t.Fatalf("the last match keeps its after context: %+v", m)
			}
		})
		t.Run("Include", func(t *testing.T) {
			if got := where(grep(bothy.GrepOptions{Pattern: "hello", IgnoreCase: true, Include: "*.txt"})); got != "docs/notes.txt:1" {
				t.Fatalf("include base = %s", got)
			}
			if got := where(grep(bothy.GrepOptions{Pattern: "hello", IgnoreCase: true, Include: "src/**/*.go"})); got != "src/main.go:6 src/util.go:2" {
				t.Fatalf("include path = %s", got)
			}
		})
		t.Run("File", func(t *testing.T) {
			if got := where(grep(bothy.GrepOptions{Pattern: "package", Path: "/src/util.go"})); got != "src/util.go:1" {
				t.Fatalf("grep one file = %s", got)
			}
		})
		t.Run("ThroughRootLink", func(t *testing.T) {
			if got := where(grep(bothy.GrepOptions{Pattern: "TODO", Path: "srclink"})); got != "src/util.go:2" {
				t.Fatalf("grep via link = %s", got)
			}
		})
		t.Run("SkipsBinary", func(t *testing.T) {
			res := grep(bothy.GrepOptions{Pattern: "binary"})
			if len(res.Matches) != 0 {
				t.Fatalf("binary file matched: %s", where(res))
			}
		})
		t.Run("ErrPattern", func(t *testing.T) {
			_, err := e.fs.Grep(e.ctx, e.tenant, e.computer, bothy.GrepOptions{Pattern: "a("})
			storetest.WantCode(t, err, bothy.EINVALID)
			_, err = e.fs.Grep(e.ctx, e.tenant, e.computer, bothy.GrepOptions{})
			storetest.WantCode(t, err, bothy.EINVALID)
			_, err = e.fs.Grep(e.ctx, e.tenant, e.computer, bothy.GrepOptions{Pattern: "a", Include: "[", Path: ""})
			storetest.WantCode(t, err, bothy.EINVALID)
		})
		t.Run("ErrNotFound", func(t *testing.T) {
			_, err := e.fs.Grep(e.ctx, e.tenant, e.computer, bothy.GrepOptions{Pattern: "a", Path: "nope"})
			storetest.WantCode(t, err, bothy.ENOTFOUND)
		})
	})
}

func TestFS_Grep_ByteCap(t *testing.T) {
	runOpts(t, workspace.Options{MaxGrepBytes: 5000}, func(t *testing.T, e *env) {
		line := "needle " + strings.Repeat(".", 92) + "\n" // 100 bytes
		e.write("a", strings.Repeat(line, 30))
		e.write("b", strings.Repeat(line, 30))
		res, err := e.fs.Grep(e.ctx, e.tenant, e.computer, bothy.GrepOptions{Pattern: "needle"})
		if err != nil {
			t.Fatal(err)
		} else if !res.Truncated || res.BytesScanned != 5000 || len(res.Matches) != 50 {
			t.Fatalf("byte cap: truncated %v, %d bytes, %d matches", res.Truncated, res.BytesScanned, len(res.Matches))
		}
	})
}

func TestFS_Grep_LongLine(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		var buf bytes.Buffer
		buf.WriteString(strings.Repeat("x", 3<<20))
		buf.WriteString("needle\nshort needle\n")
		if _, err := e.fs.WriteFile(e.ctx, e.tenant, e.computer, "long", &buf, bothy.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		res, err := e.fs.Grep(e.ctx, e.tenant, e.computer, bothy.GrepOptions{Pattern: "needle"})
		if err != nil || len(res.Matches) != 1 || res.Matches[0].Line != 2 {
			t.Fatalf("long line: %+v, %v", res, err)
		}
	})
}

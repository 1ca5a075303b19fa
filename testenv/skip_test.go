package testenv_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// bareSkip matches a call of Skip, Skipf or SkipNow on anything but this
// package, such as t.Skip(...) or b.SkipNow().
var bareSkip = regexp.MustCompile(`(\w+)\.Skip(f|Now)?\(`)

// TestNoBareSkip fails on every call of a testing Skip method outside
// testenv, listing each by file and line: a skip for a missing dependency
// must be testenv.Skip (or Root, Program, PostgresURL), which fails under
// BOTHY_TEST_REQUIRE_ALL=1, and the others are testenv.Short and
// testenv.NotApplicable.
func TestNoBareSkip(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module root is not %s: %v", root, err)
	}
	var bare []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "testenv") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(root, path)
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			for _, m := range bareSkip.FindAllStringSubmatch(sc.Text(), -1) {
				if m[1] != "testenv" {
					bare = append(bare, rel+":"+strconv.Itoa(n)+": "+strings.TrimSpace(sc.Text()))
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bare) > 0 {
		t.Errorf("%d bare skips; use testenv.Skip (or Root, Program, PostgresURL) for a missing dependency, testenv.Short or testenv.NotApplicable otherwise:\n%s",
			len(bare), strings.Join(bare, "\n"))
	}
}

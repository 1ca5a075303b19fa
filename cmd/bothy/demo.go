package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
)

// runDemo is the quick start's main job on the embedded default: it builds a
// small project, checkpoints it, edits it, checkpoints again (incrementally),
// writes a file into the cold workspace through the files API, restores the
// latest revision into a new directory and verifies it byte for byte.
func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	e, _, err := openVerb(ctx, fs, args, "bothy demo", func([]string) bool { return true })
	if err != nil {
		return err
	}
	defer e.Close()
	id := "demo-" + time.Now().UTC().Format("20060102-150405")
	dir := filepath.Join(e.cfg.data, "demo", id)
	src, dst := filepath.Join(dir, "project"), filepath.Join(dir, "restored")
	fmt.Printf("data directory %s (SQLite + local blobs), computer %s\n\n", e.cfg.data, id)

	if err := writeDemoProject(src); err != nil {
		return err
	}
	// A file changed within 50 ms of a scan is "racily clean" (its mtime
	// cannot prove it unchanged later), so the stat cache would not keep it;
	// let the new project age past that window, as any real one has.
	time.Sleep(100 * time.Millisecond)
	fmt.Printf("1. checkpoint %s\n", src)
	rev, res, err := e.checkpoint(ctx, id, src)
	if err != nil {
		return err
	}
	printCheckpoint(rev, res)

	fmt.Printf("\n2. edit src/main.go and checkpoint again: only the change is read and written\n")
	time.Sleep(100 * time.Millisecond) // past the racy window after checkpoint 1
	if err := os.WriteFile(filepath.Join(src, "src", "main.go"), []byte("package main\n\nfunc main() { println(\"hello again\") }\n"), 0o644); err != nil {
		return err
	}
	if rev, res, err = e.checkpoint(ctx, id, src); err != nil {
		return err
	}
	printCheckpoint(rev, res)

	fmt.Printf("\n3. write notes.txt into the cold workspace through the files API (no runtime)\n")
	note := "written while the computer was cold\n"
	files := e.files()
	if rev, err = files.WriteFile(ctx, e.tenant.ID, id, "/notes.txt", strings.NewReader(note), bothy.WriteOptions{}); err != nil {
		return err
	}
	fmt.Printf("revision %d  root %.16s\n", rev.Number, rev.RootDigest)
	if err := os.WriteFile(filepath.Join(src, "notes.txt"), []byte(note), 0o644); err != nil {
		return err
	}
	matches, err := files.Grep(ctx, e.tenant.ID, id, bothy.GrepOptions{Pattern: "hello", Include: "*.go"})
	if err != nil {
		return err
	}
	for _, m := range matches.Matches {
		fmt.Printf("  grep hello: %s:%d: %s\n", m.Path, m.Line, m.Text)
	}

	fmt.Printf("\n4. restore revision %d into %s and compare\n", rev.Number, dst)
	c, err := e.computer(ctx, id, false)
	if err != nil {
		return err
	}
	_, snap, err := e.snapshot(ctx, c, 0)
	if err != nil {
		return err
	}
	if err := snap.Restore(ctx, dst, checkpoint.RestoreOptions{}); err != nil {
		return err
	}
	n, err := compareTrees(src, dst)
	if err != nil {
		return err
	}
	fmt.Printf("identical: %d entries (files, directories, symlinks, modes)\n", n)

	fmt.Printf("\n5. what changed from revision 1 to %d\n", rev.Number)
	_, first, err := e.snapshot(ctx, c, 1)
	if err != nil {
		return err
	}
	changes, err := checkpoint.Diff(ctx, first, snap)
	if err != nil {
		return err
	}
	for _, ch := range changes {
		fmt.Printf("  %s %s\n", ch.Kind, ch.Path)
	}
	fmt.Printf("\nok. Try: go run ./cmd/bothy log -c %s --data %s\n", id, e.cfg.data)
	return nil
}

func writeDemoProject(dir string) error {
	files := map[string]string{
		"README.md":          "# demo\n\nA project kept by bothy.\n",
		"src/main.go":        "package main\n\nfunc main() { println(\"hello\") }\n",
		"src/lib/strings.go": "package lib\n\n// Hello says hello.\nfunc Hello() string { return \"hello\" }\n",
		"data/blob.bin":      strings.Repeat("\x00\x01\x02\x03", 300000),
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho run\n"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "build", "empty"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink("src/main.go", filepath.Join(dir, "main.go")); err != nil {
		return err
	}
	return os.Symlink("does/not/exist", filepath.Join(dir, "dangling"))
}

// compareTrees walks a and b and reports the first difference in names,
// types, permission bits, file content or symlink targets.
func compareTrees(a, b string) (int, error) {
	n := 0
	err := filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		q := filepath.Join(b, rel)
		ai, err := os.Lstat(p)
		if err != nil {
			return err
		}
		bi, err := os.Lstat(q)
		if err != nil {
			return fmt.Errorf("compare %s: %w", rel, err)
		}
		if ai.Mode() != bi.Mode() {
			return fmt.Errorf("compare %s: mode %v != %v", rel, ai.Mode(), bi.Mode())
		}
		switch {
		case ai.Mode()&fs.ModeSymlink != 0:
			at, _ := os.Readlink(p)
			bt, _ := os.Readlink(q)
			if at != bt {
				return fmt.Errorf("compare %s: symlink %q != %q", rel, at, bt)
			}
		case ai.Mode().IsRegular():
			ab, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			bb, err := os.ReadFile(q)
			if err != nil {
				return err
			}
			if !bytes.Equal(ab, bb) {
				return fmt.Errorf("compare %s: content differs", rel)
			}
		case ai.IsDir():
			ae, _ := os.ReadDir(p)
			be, _ := os.ReadDir(q)
			if len(ae) != len(be) {
				return fmt.Errorf("compare %s: %d entries != %d", rel, len(ae), len(be))
			}
		}
		n++
		return nil
	})
	return n, err
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/workspace"
)

// files returns the cold-workspace file service of the environment.
func (e *env) files() bothy.FileService {
	return workspace.New(e.store, e.blobs, workspace.Options{})
}

const localUsage = "bothy local ls|cat|put -c ID ..."

// runLocal runs a file verb on a cold workspace in the data directory
// itself, without a server: "bothy local ls|cat|put". The verbs of the same
// names without "local" go through the API.
func runLocal(ctx context.Context, args []string) error {
	verbs := map[string]func(context.Context, []string) error{"ls": runLs, "cat": runCat, "put": runPut}
	if len(args) == 0 {
		return bothy.Errorf(bothy.EINVALID, "usage: %s", localUsage)
	}
	fn, ok := verbs[args[0]]
	if !ok {
		return bothy.Errorf(bothy.EINVALID, "unknown local verb %q; usage: %s", args[0], localUsage)
	}
	return fn(ctx, args[1:])
}

func runLs(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	id := fs.String("c", "", "computer id")
	e, args, err := openVerb(ctx, fs, args, "bothy local ls -c ID [PATH]", func(args []string) bool { return *id != "" && len(args) <= 1 })
	if err != nil {
		return err
	}
	defer e.Close()
	p := "/"
	if len(args) == 1 {
		p = args[0]
	}
	infos, err := e.files().ReadDir(ctx, e.tenant.ID, *id, p, bothy.ReadDirOptions{})
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	for _, fi := range infos {
		name := fi.Name
		if fi.Type == bothy.FileTypeDir {
			name += "/"
		} else if fi.Type == bothy.FileTypeSymlink {
			name += " -> " + fi.Target
		}
		fmt.Fprintf(w, "%s\t%04o\t%d\t%s\n", fi.Type, fi.Mode, fi.Size, name)
	}
	return w.Flush()
}

func runCat(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cat", flag.ContinueOnError)
	id := fs.String("c", "", "computer id")
	e, args, err := openVerb(ctx, fs, args, "bothy local cat -c ID PATH", func(args []string) bool { return *id != "" && len(args) == 1 })
	if err != nil {
		return err
	}
	defer e.Close()
	rc, _, err := e.files().ReadFile(ctx, e.tenant.ID, *id, args[0], 0, -1)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(os.Stdout, rc)
	return err
}

func runPut(ctx context.Context, args []string) error {
	var cfg config
	fs := flag.NewFlagSet("put", flag.ContinueOnError)
	id := fs.String("c", "", "computer id (created on first use)")
	mode := fs.Uint("mode", 0, "permission bits (default: keep, or 0644 for a new file)")
	excl := fs.Bool("exclusive", false, "fail if the path exists")
	parents := fs.Bool("p", true, "create missing parent directories")
	args, err := parseFlags(fs, &cfg, args)
	if err != nil {
		return err
	} else if *id == "" || len(args) < 1 || len(args) > 2 {
		return bothy.Errorf(bothy.EINVALID, "usage: bothy local put -c ID PATH [FILE]")
	}
	var r io.Reader = os.Stdin
	if len(args) == 2 {
		f, err := os.Open(args[1])
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	e, err := openEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	if _, err := e.computer(ctx, *id, true); err != nil {
		return err
	}
	rev, err := e.files().WriteFile(ctx, e.tenant.ID, *id, args[0], r,
		bothy.WriteOptions{Mode: os.FileMode(*mode) & 0o777, Exclusive: *excl, MkdirParents: *parents})
	if err != nil {
		return err
	}
	fmt.Printf("revision %d  root %.16s\n", rev.Number, rev.RootDigest)
	return nil
}

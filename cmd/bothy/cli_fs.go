package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"strconv"
	"text/tabwriter"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
)

const fsUsage = "bothy fs ls|stat|cat|rm ID PATH, bothy fs put ID PATH < FILE, bothy fs grep ID PATTERN [PATH]"

// fs runs a file verb on a computer's workspace over the API.
func (c *cli) fs(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return bothy.Errorf(bothy.EINVALID, "usage: %s", fsUsage)
	}
	verbs := map[string]func(context.Context, []string) error{
		"ls": c.fsList, "stat": c.fsStat, "cat": c.fsCat, "put": c.fsPut, "rm": c.fsRemove, "grep": c.fsGrep,
	}
	fn, ok := verbs[args[0]]
	if !ok {
		return bothy.Errorf(bothy.EINVALID, "unknown fs verb %q; usage: %s", args[0], fsUsage)
	}
	return fn(ctx, args[1:])
}

// printRevision prints the revision a change committed.
func (c *cli) printRevision(rev *bothy.Revision, asJSON bool) error {
	if asJSON {
		return c.printJSON(rev)
	}
	_, err := fmt.Fprintf(c.out, "revision %d  root %.16s\n", rev.Number, rev.RootDigest)
	return err
}

func (c *cli) fsList(ctx context.Context, args []string) error {
	var rf remoteFlags
	fs := flag.NewFlagSet("fs ls", flag.ContinueOnError)
	cl, args, err := c.verb(fs, &rf, args, -1, "bothy fs ls ID [PATH]", func(a []string) bool { return len(a) == 1 || len(a) == 2 })
	if err != nil {
		return err
	}
	p := "/"
	if len(args) == 2 {
		p = args[1]
	}
	infos, err := cl.ReadDir(ctx, "", args[0], p, bothy.ReadDirOptions{})
	if err != nil {
		return err
	} else if rf.json {
		if infos == nil {
			infos = []*bothy.FileInfo{}
		}
		return c.printJSON(bhttp.EntryList{Entries: infos})
	}
	w := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	for _, fi := range infos {
		name := fi.Name
		if fi.Type == bothy.FileTypeDir {
			name += "/"
		} else if fi.Type == bothy.FileTypeSymlink {
			name += " -> " + fi.Target
		}
		fmt.Fprintf(w, "%s\t%04o\t%d\t%s\t%s\n", fi.Type, fi.Mode, fi.Size, when(fi.ModTime), name)
	}
	return w.Flush()
}

func (c *cli) fsStat(ctx context.Context, args []string) error {
	var rf remoteFlags
	fs := flag.NewFlagSet("fs stat", flag.ContinueOnError)
	cl, args, err := c.verb(fs, &rf, args, -1, "bothy fs stat ID PATH", nArgs(2))
	if err != nil {
		return err
	}
	fi, err := cl.Lstat(ctx, "", args[0], args[1])
	if err != nil {
		return err
	} else if rf.json {
		return c.printJSON(fi)
	}
	w := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"path", fi.Path}, {"type", fi.Type}, {"mode", fmt.Sprintf("%04o", fi.Mode.Perm())},
		{"size", strconv.FormatInt(fi.Size, 10)}, {"modified", when(fi.ModTime)}, {"target", fi.Target},
	} {
		if kv[1] != "" {
			fmt.Fprintf(w, "%s\t%s\n", kv[0], kv[1])
		}
	}
	return w.Flush()
}

// fsCat writes a file's bytes to stdout; --json does not apply.
func (c *cli) fsCat(ctx context.Context, args []string) error {
	var rf remoteFlags
	fs := flag.NewFlagSet("fs cat", flag.ContinueOnError)
	cl, args, err := c.verb(fs, &rf, args, -1, "bothy fs cat ID PATH", nArgs(2))
	if err != nil {
		return err
	}
	rc, _, err := cl.ReadFile(ctx, "", args[0], args[1], 0, -1)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(c.out, rc)
	return err
}

func (c *cli) fsPut(ctx context.Context, args []string) error {
	var rf remoteFlags
	fs := flag.NewFlagSet("fs put", flag.ContinueOnError)
	mode := fs.String("mode", "", "permission bits in octal (default: keep, or 0644 for a new file)")
	excl := fs.Bool("exclusive", false, "fail if the path exists")
	parents := fs.Bool("p", true, "create missing parent directories")
	cl, args, err := c.verb(fs, &rf, args, -1, "bothy fs put ID PATH < FILE", nArgs(2))
	if err != nil {
		return err
	}
	opts := bothy.WriteOptions{Exclusive: *excl, MkdirParents: *parents}
	if *mode != "" {
		m, err := strconv.ParseUint(*mode, 8, 32)
		if err != nil || m > 0o777 {
			return bothy.Errorf(bothy.EINVALID, "--mode must be octal permission bits such as 0644")
		}
		opts.Mode = iofs.FileMode(m)
	}
	rev, err := cl.WriteFile(ctx, "", args[0], args[1], c.in, opts)
	if err != nil {
		return err
	}
	return c.printRevision(rev, rf.json)
}

func (c *cli) fsRemove(ctx context.Context, args []string) error {
	var rf remoteFlags
	fs := flag.NewFlagSet("fs rm", flag.ContinueOnError)
	recursive := fs.Bool("r", false, "remove a directory and its contents")
	force := fs.Bool("f", false, "a missing path is not an error")
	cl, args, err := c.verb(fs, &rf, args, -1, "bothy fs rm [-r] [-f] ID PATH", nArgs(2))
	if err != nil {
		return err
	}
	rev, err := cl.Remove(ctx, "", args[0], args[1], bothy.RemoveOptions{Recursive: *recursive, Force: *force})
	if err != nil {
		return err
	}
	return c.printRevision(rev, rf.json)
}

// fsGrep prints matches as path:line:text, context lines as path-line-text,
// and exits 1 when nothing matched, as grep does.
func (c *cli) fsGrep(ctx context.Context, args []string) error {
	var rf remoteFlags
	var opts bothy.GrepOptions
	fs := flag.NewFlagSet("fs grep", flag.ContinueOnError)
	fs.BoolVar(&opts.IgnoreCase, "i", false, "match case-insensitively")
	fs.BoolVar(&opts.Literal, "F", false, "the pattern is plain text, not a regular expression")
	fs.IntVar(&opts.Context, "C", 0, "lines of context around each match")
	fs.IntVar(&opts.Limit, "limit", 0, "most matches (0: the server's default, 1000)")
	fs.StringVar(&opts.Include, "include", "", "search only files matching this glob")
	cl, args, err := c.verb(fs, &rf, args, -1, "bothy fs grep [-i] [-F] [-C N] [--include GLOB] ID PATTERN [PATH]",
		func(a []string) bool { return len(a) == 2 || len(a) == 3 })
	if err != nil {
		return err
	}
	opts.Pattern = args[1]
	if len(args) == 3 {
		opts.Path = args[2]
	}
	res, err := cl.Grep(ctx, "", args[0], opts)
	if err != nil {
		return err
	}
	if rf.json {
		if err := c.printJSON(res); err != nil {
			return err
		}
	} else {
		for _, m := range res.Matches {
			for i, l := range m.Before {
				fmt.Fprintf(c.out, "%s-%d-%s\n", m.Path, m.Line-len(m.Before)+i, l)
			}
			fmt.Fprintf(c.out, "%s:%d:%s\n", m.Path, m.Line, m.Text)
			for i, l := range m.After {
				fmt.Fprintf(c.out, "%s-%d-%s\n", m.Path, m.Line+1+i, l)
			}
		}
		if res.Truncated {
			fmt.Fprintln(c.err, "bothy: the search stopped early; more matches may exist")
		}
	}
	if len(res.Matches) == 0 {
		return exitCode(1)
	}
	return nil
}

package workspace

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
)

// Grep limits.
const (
	DefaultGrepLimit = 1000
	// MaxGrepLimit caps the caller's limit on matches.
	MaxGrepLimit = 10000
	// MaxGrepOutput caps the text one Grep returns, paths and context lines
	// included: each match carries its own copy of its context, so without
	// it the output could be far larger than the bytes read.
	MaxGrepOutput  = 16 << 20
	maxGrepContext = 100
	binarySniff    = 8 << 10 // a NUL in this many leading bytes marks a binary file
	maxGrepLine    = 1 << 20 // longer lines are matched and returned cut to this length
)

// Grep searches the text files under opts.Path (a file or a directory,
// followed through symlinks inside the workspace; the walk below it never
// follows symlinks), in path order. Files with a NUL byte in their first
// 8 KiB are skipped as binary. It stops at opts.Limit matches or after
// Options.MaxGrepBytes bytes read, and then sets Truncated.
func (f *FS) Grep(ctx context.Context, tenantID, computerID string, opts bothy.GrepOptions) (*bothy.GrepResult, error) {
	g, err := f.newGrepper(opts)
	if err != nil {
		return nil, err
	}
	root, err := f.clean(opts.Path)
	if err != nil {
		return nil, err
	}
	t, err := f.read(ctx, tenantID, computerID)
	if err != nil {
		return nil, err
	}
	g.t, g.ctx = t, ctx
	l, err := t.resolve(ctx, root, true, false)
	if err != nil {
		return nil, err
	}
	if l.root() {
		err = g.walk(ctx, t.root, ".")
	} else if e := l.entry(); e == nil {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "%q does not exist", root)
	} else if e.Type == checkpoint.TypeDir {
		var d *dir
		if d, err = t.dirAt(ctx, l, root); err == nil {
			err = g.walk(ctx, d, l.path)
		}
	} else {
		err = g.file(ctx, l.path, e)
	}
	if err != nil && err != errStop {
		return nil, err
	}
	if g.res.Matches == nil {
		g.res.Matches = []bothy.GrepMatch{}
	}
	return &g.res, nil
}

type grepper struct {
	ctx      context.Context
	t        *txn
	re       *regexp.Regexp
	include  string   // a base-name glob, or
	includes []string // path glob elements
	context  int
	limit    int
	budget   int64 // bytes left to read
	output   int64 // text bytes left to return
	res      bothy.GrepResult
}

func (f *FS) newGrepper(opts bothy.GrepOptions) (*grepper, error) {
	if opts.Pattern == "" {
		return nil, bothy.Errorf(bothy.EINVALID, "grep pattern is empty")
	} else if opts.Context < 0 || opts.Limit < 0 {
		return nil, bothy.Errorf(bothy.EINVALID, "grep context and limit must not be negative")
	}
	expr := opts.Pattern
	if opts.Literal {
		expr = regexp.QuoteMeta(expr)
	}
	if opts.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, bothy.Errorf(bothy.EINVALID, "bad grep pattern: %s", err)
	}
	g := &grepper{re: re, context: min(opts.Context, maxGrepContext), limit: min(opts.Limit, MaxGrepLimit),
		budget: f.opts.MaxGrepBytes, output: MaxGrepOutput}
	if g.limit == 0 {
		g.limit = DefaultGrepLimit
	}
	switch {
	case opts.Include == "":
	case strings.Contains(opts.Include, "/"):
		if g.includes, err = f.compileGlob(opts.Include); err != nil {
			return nil, err
		}
	default:
		if _, err := path.Match(opts.Include, ""); err != nil {
			return nil, bothy.Errorf(bothy.EINVALID, "bad include pattern %q", opts.Include)
		}
		g.include = opts.Include
	}
	return g, nil
}

// included reports whether the file at p passes the include filter.
func (g *grepper) included(p string) bool {
	if g.includes != nil {
		return matchPath(g.includes, splitPath(p))
	} else if g.include != "" {
		ok, _ := path.Match(g.include, baseName(p))
		return ok
	}
	return true
}

// walk greps the files below d, depth first in name order.
func (g *grepper) walk(ctx context.Context, d *dir, prefix string) error {
	for i := range d.entries {
		e := &d.entries[i]
		q := joinPath(prefix, e.Name)
		switch e.Type {
		case checkpoint.TypeDir:
			k, err := g.t.child(ctx, d, i)
			if err != nil {
				return err
			} else if err := g.walk(ctx, k, q); err != nil {
				return err
			}
		case checkpoint.TypeFile:
			if err := g.file(ctx, q, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// file greps one file.
func (g *grepper) file(ctx context.Context, p string, e *checkpoint.Entry) error {
	if err := ctx.Err(); err != nil {
		return err
	} else if !g.included(p) || e.Size == 0 {
		return nil
	} else if g.budget <= 0 {
		g.res.Truncated = true
		return errStop
	}
	n := min(e.Size, g.budget)
	rc, err := g.t.snap.OpenFile(ctx, e, 0, n)
	if err != nil {
		return fmt.Errorf("grep %q: %w", p, err)
	}
	defer rc.Close()
	g.budget -= n
	g.res.FilesScanned++
	g.res.BytesScanned += n
	br := bufio.NewReaderSize(rc, 64<<10)
	head, err := br.Peek(binarySniff)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return fmt.Errorf("grep %q: %w", p, err)
	} else if bytes.IndexByte(head, 0) >= 0 {
		return nil
	}
	if err := g.lines(p, br); err != nil {
		return err
	}
	if n < e.Size {
		g.res.Truncated = true
		return errStop
	}
	return nil
}

// lines matches each line of r.
func (g *grepper) lines(p string, r *bufio.Reader) error {
	var before []string
	var pending []int // indexes of matches still collecting After lines
	stopping := false
	for num := 1; ; num++ {
		line, err := readLine(r)
		if err == io.EOF && line == nil {
			break
		} else if err != nil && err != io.EOF {
			return fmt.Errorf("grep %q: %w", p, err)
		}
		if num%4096 == 0 {
			if err := g.ctx.Err(); err != nil {
				return err
			}
		}
		text := string(line)
		keep := pending[:0]
		for _, m := range pending {
			if !g.spend(len(text)) {
				stopping = true
				continue
			}
			g.res.Matches[m].After = append(g.res.Matches[m].After, text)
			if len(g.res.Matches[m].After) < g.context {
				keep = append(keep, m)
			}
		}
		pending = keep
		if !stopping && g.re.Match(line) {
			cost := len(text) + len(p) + 16
			for _, b := range before {
				cost += len(b)
			}
			if !g.spend(cost) {
				stopping = true
			} else {
				g.res.Matches = append(g.res.Matches, bothy.GrepMatch{Path: p, Line: num, Text: text, Before: append([]string(nil), before...)})
				if g.context > 0 {
					pending = append(pending, len(g.res.Matches)-1)
				}
				if len(g.res.Matches) >= g.limit {
					g.res.Truncated = true
					stopping = true
				}
			}
		}
		if stopping && len(pending) == 0 {
			return errStop
		}
		if g.context > 0 {
			if len(before) == g.context {
				before = before[1:]
			}
			before = append(before, text)
		}
		if err == io.EOF {
			break
		}
	}
	if stopping {
		return errStop
	}
	return nil
}

// spend takes n bytes from the output budget; when it runs out the result is
// marked truncated and spend reports false.
func (g *grepper) spend(n int) bool {
	if g.output < int64(n) {
		g.output = 0
		g.res.Truncated = true
		return false
	}
	g.output -= int64(n)
	return true
}

// readLine returns the next line without its newline, cut to maxGrepLine
// bytes; at the end it returns io.EOF, with the last unterminated line if any.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(line) < maxGrepLine {
			line = append(line, frag[:min(len(frag), maxGrepLine-len(line))]...)
		}
		switch err {
		case bufio.ErrBufferFull:
			continue
		case nil:
			return bytes.TrimSuffix(line, []byte("\n")), nil
		case io.EOF:
			if len(line) == 0 {
				return nil, io.EOF
			}
			return line, io.EOF
		default:
			return nil, err
		}
	}
}

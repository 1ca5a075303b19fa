package workspace

import (
	"context"
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
)

// Glob limits.
const (
	// DefaultGlobLimit is the number of results of a Glob with limit 0.
	DefaultGlobLimit = 1000
	// MaxGlobLimit caps the caller's limit on results.
	MaxGlobLimit = 10000
)

// errStop ends a walk early.
var errStop = errors.New("stop")

// Glob returns up to limit entries (0 means DefaultGlobLimit, and at most
// MaxGlobLimit) matching pattern, sorted by path: each
// element is matched with path.Match (so '*' matches names starting with
// '.'), and an element "**" matches any number of directories, none
// included. Symlinks are matched but never descended into. The pattern is
// cleaned like a path, so one that escapes the root is EINVALIDPATH.
func (f *FS) Glob(ctx context.Context, tenantID, computerID, pattern string, limit int) ([]*bothy.FileInfo, error) {
	segs, err := f.compileGlob(pattern)
	if err != nil {
		return nil, err
	} else if limit < 0 {
		return nil, bothy.Errorf(bothy.EINVALID, "glob limit must not be negative")
	} else if limit == 0 {
		limit = DefaultGlobLimit
	}
	limit = min(limit, MaxGlobLimit)
	t, err := f.read(ctx, tenantID, computerID)
	if err != nil {
		return nil, err
	}
	g := &globber{t: t, segs: segs, limit: limit, seen: map[string]bool{}, visited: map[string]bool{}}
	if len(segs) > 0 {
		if err := g.glob(ctx, t.root, ".", nil, 0); err != nil && err != errStop {
			return nil, err
		}
	}
	slices.SortFunc(g.out, func(a, b *bothy.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return g.out, nil
}

// compileGlob cleans a pattern and checks each element's syntax.
func (f *FS) compileGlob(pattern string) ([]string, error) {
	p, err := f.clean(pattern)
	if err != nil {
		return nil, err
	}
	var segs []string
	stars := 0
	for _, s := range splitPath(p) {
		if _, err := path.Match(s, ""); err != nil {
			return nil, bothy.Errorf(bothy.EINVALID, "bad glob pattern %q", pattern)
		}
		if s == "**" {
			if len(segs) > 0 && segs[len(segs)-1] == "**" {
				continue // "**/**" matches what "**" matches
			}
			stars++
		}
		segs = append(segs, s)
	}
	// Each "**" multiplies the states a walk can visit by the number of
	// directories, so a pattern may hold only a few.
	if stars > maxGlobStars {
		return nil, bothy.Errorf(bothy.EINVALID, "glob pattern %q has more than %d '**' elements", pattern, maxGlobStars)
	}
	return segs, nil
}

// maxGlobStars is the most "**" elements a glob pattern may hold.
const maxGlobStars = 8

type globber struct {
	t       *txn
	segs    []string
	limit   int
	out     []*bothy.FileInfo
	seen    map[string]bool // paths already in out
	visited map[string]bool // (directory, element index) pairs already expanded
}

// glob adds the paths under d (at path prefix, described by self, nil for
// the root) that match segs[i:].
func (g *globber) glob(ctx context.Context, d *dir, prefix string, self *checkpoint.Entry, i int) error {
	if i == len(g.segs) {
		if self != nil {
			return g.emit(prefix, self)
		}
		return nil
	}
	// "**" can reach one directory at one index by many routes.
	key := strconv.Itoa(i) + "\x00" + prefix
	if g.visited[key] {
		return nil
	}
	g.visited[key] = true
	if err := ctx.Err(); err != nil {
		return err
	}
	seg := g.segs[i]
	if seg == "**" {
		if err := g.glob(ctx, d, prefix, self, i+1); err != nil {
			return err
		}
		for j := range d.entries {
			e := &d.entries[j]
			q := joinPath(prefix, e.Name)
			if e.Type == checkpoint.TypeDir {
				k, err := g.t.child(ctx, d, j)
				if err != nil {
					return err
				} else if err := g.glob(ctx, k, q, e, i); err != nil {
					return err
				}
			} else if i+1 == len(g.segs) {
				if err := g.emit(q, e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for j := range d.entries {
		e := &d.entries[j]
		if ok, _ := path.Match(seg, e.Name); !ok {
			continue
		}
		q := joinPath(prefix, e.Name)
		if i+1 == len(g.segs) {
			if err := g.emit(q, e); err != nil {
				return err
			}
		} else if e.Type == checkpoint.TypeDir {
			k, err := g.t.child(ctx, d, j)
			if err != nil {
				return err
			} else if err := g.glob(ctx, k, q, e, i+1); err != nil {
				return err
			}
		}
	}
	return nil
}

func (g *globber) emit(p string, e *checkpoint.Entry) error {
	if g.seen[p] {
		return nil
	}
	g.seen[p] = true
	g.out = append(g.out, fileInfo(p, e))
	if len(g.out) >= g.limit {
		return errStop
	}
	return nil
}

// matchPath reports whether the elements of a clean path match the glob
// elements segs, with "**" matching any number of elements. It runs in
// O(len(segs)*len(elems)), however many "**" the pattern holds.
func matchPath(segs, elems []string) bool {
	n := len(elems)
	// next[j] reports whether segs[i+1:] matches elems[j:].
	next := make([]bool, n+1)
	next[n] = true
	for i := len(segs) - 1; i >= 0; i-- {
		cur := make([]bool, n+1)
		for j := n; j >= 0; j-- {
			if segs[i] == "**" {
				cur[j] = next[j] || (j < n && cur[j+1])
			} else if j < n && next[j+1] {
				cur[j], _ = path.Match(segs[i], elems[j])
			}
		}
		next = cur
	}
	return next[0]
}

package checkpoint

import (
	"context"
	"fmt"
	"slices"
)

// ChangeKind says how a path differs between two snapshots.
type ChangeKind uint8

// Change kinds.
const (
	Added ChangeKind = iota + 1
	Removed
	Modified
)

// String returns "added", "removed" or "modified".
func (k ChangeKind) String() string {
	switch k {
	case Added:
		return "added"
	case Removed:
		return "removed"
	case Modified:
		return "modified"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Change is one path that differs between two snapshots. Path is slash
// separated and relative to the root.
type Change struct {
	Path string
	Kind ChangeKind
}

// Diff returns the paths that differ from a to b, in path order. It walks
// only subtrees whose digests differ. An added or removed directory is
// reported with every path below it; a path whose type changed is reported
// as Modified (with the children of a former or new directory as Removed or
// Added). Metadata changes (mode, mtime) count as Modified.
func Diff(ctx context.Context, a, b *Snapshot) ([]Change, error) {
	if a.repo != b.repo && a.repo.cacheID() != b.repo.cacheID() {
		return nil, fmt.Errorf("diff: snapshots of different repos")
	}
	var out []Change
	if err := diffTrees(ctx, a, b, a.root, b.root, "", &out); err != nil {
		return nil, fmt.Errorf("diff: %w", err)
	}
	return out, nil
}

func diffTrees(ctx context.Context, a, b *Snapshot, ha, hb Hash, prefix string, out *[]Change) error {
	if ha == hb {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ta, tb := &Tree{}, &Tree{}
	var err error
	if !ha.IsZero() {
		if ta, err = a.Tree(ctx, ha); err != nil {
			return err
		}
	}
	if !hb.IsZero() {
		if tb, err = b.Tree(ctx, hb); err != nil {
			return err
		}
	}
	i, j := 0, 0
	for i < len(ta.Entries) || j < len(tb.Entries) {
		var ea, eb *Entry
		switch {
		case j >= len(tb.Entries) || i < len(ta.Entries) && ta.Entries[i].Name < tb.Entries[j].Name:
			ea = &ta.Entries[i]
			i++
		case i >= len(ta.Entries) || tb.Entries[j].Name < ta.Entries[i].Name:
			eb = &tb.Entries[j]
			j++
		default:
			ea, eb = &ta.Entries[i], &tb.Entries[j]
			i++
			j++
		}
		var name string
		if ea != nil {
			name = ea.Name
		} else {
			name = eb.Name
		}
		p := joinRel(prefix, name)
		switch {
		case eb == nil:
			*out = append(*out, Change{p, Removed})
			if ea.Type == TypeDir {
				if err := diffTrees(ctx, a, b, ea.Tree, Hash{}, p, out); err != nil {
					return err
				}
			}
		case ea == nil:
			*out = append(*out, Change{p, Added})
			if eb.Type == TypeDir {
				if err := diffTrees(ctx, a, b, Hash{}, eb.Tree, p, out); err != nil {
					return err
				}
			}
		case ea.Type == TypeDir && eb.Type == TypeDir:
			if ea.Mode != eb.Mode {
				*out = append(*out, Change{p, Modified})
			}
			if err := diffTrees(ctx, a, b, ea.Tree, eb.Tree, p, out); err != nil {
				return err
			}
		case ea.Type != eb.Type:
			*out = append(*out, Change{p, Modified})
			if ea.Type == TypeDir {
				if err := diffTrees(ctx, a, b, ea.Tree, Hash{}, p, out); err != nil {
					return err
				}
			}
			if eb.Type == TypeDir {
				if err := diffTrees(ctx, a, b, Hash{}, eb.Tree, p, out); err != nil {
					return err
				}
			}
		case !sameEntry(ea, eb):
			*out = append(*out, Change{p, Modified})
		}
	}
	return nil
}

func sameEntry(a, b *Entry) bool {
	return a.Mode == b.Mode && a.Size == b.Size && a.ModTime == b.ModTime &&
		a.Target == b.Target && slices.Equal(a.Chunks, b.Chunks)
}

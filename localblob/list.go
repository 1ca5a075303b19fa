package localblob

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bothyhq/bothy"
)

// ListBlobs implements bothy.BlobLister. It walks only the directories that
// can hold keys with prefix, and orders each directory's entries as their
// keys sort: a directory "a" sorts as "a/", after "a-b" and before "a_b".
func (s *Store) ListBlobs(ctx context.Context, prefix string, fn func(bothy.BlobInfo) error) error {
	// Every key under prefix lies under prefix's directory part, which must
	// then be a valid key itself.
	dir := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dir = prefix[:i]
		if bothy.ValidateBlobKey(dir) != nil {
			return nil
		}
	}
	if err := s.walk(ctx, dir, prefix, fn); err != nil {
		return fmt.Errorf("list blobs %s: %w", prefix, err)
	}
	return nil
}

// walk calls fn for the blobs under directory key dir ("" for the root)
// whose keys start with prefix.
func (s *Store) walk(ctx context.Context, dir, prefix string, fn func(bothy.BlobInfo) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	entries, err := os.ReadDir(filepath.Join(s.dir, filepath.FromSlash(dir)))
	if isNotExist(err) {
		return nil
	} else if err != nil {
		return err
	}
	type entry struct {
		name  string // the key, with a trailing slash for a directory
		isDir bool
	}
	var list []entry
	for _, e := range entries {
		// Skips the temporary directory and anything else no key can name.
		if bothy.ValidateBlobKey(e.Name()) != nil || strings.Contains(e.Name(), "/") {
			continue
		}
		key := e.Name()
		if dir != "" {
			key = dir + "/" + key
		}
		switch {
		case e.IsDir():
			key += "/"
			if strings.HasPrefix(key, prefix) || strings.HasPrefix(prefix, key) {
				list = append(list, entry{key, true})
			}
		case e.Type().IsRegular():
			if strings.HasPrefix(key, prefix) {
				list = append(list, entry{key, false})
			}
		}
	}
	slices.SortFunc(list, func(a, b entry) int { return strings.Compare(a.name, b.name) })

	for _, e := range list {
		if e.isDir {
			if err := s.walk(ctx, strings.TrimSuffix(e.name, "/"), prefix, fn); err != nil {
				return err
			}
			continue
		}
		info, err := os.Lstat(s.path(e.name))
		if isNotExist(err) {
			continue // deleted since ReadDir
		} else if err != nil {
			return err
		}
		if err := fn(bothy.BlobInfo{Key: e.name, Size: info.Size(), ModTime: info.ModTime()}); err != nil {
			return err
		}
	}
	return nil
}

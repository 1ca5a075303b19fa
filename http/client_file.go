package http

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	nethttp "net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
)

// filePath returns the URL path of a file route. Empty elements are
// dropped (as the workspace would), the others escaped,
// and "." and ".." are sent as %2E so that they reach the workspace, which
// refuses an escape as invalid_path, rather than being cleaned away on the
// way.
func filePath(id, p string) string {
	var elems []string
	for _, e := range strings.Split(p, "/") {
		if e == "." || e == ".." {
			elems = append(elems, strings.ReplaceAll(e, ".", "%2E"))
		} else if e != "" {
			elems = append(elems, url.PathEscape(e))
		}
	}
	return computerPath(id, "/files/", strings.Join(elems, "/"))
}

// ReadFile streams length bytes from off (length < 0: to the end) with a
// Range request when only part of the file is wanted.
func (c *Client) ReadFile(ctx context.Context, _, computerID, p string, off, length int64) (io.ReadCloser, *bothy.FileInfo, error) {
	if off < 0 {
		return nil, nil, bothy.Errorf(bothy.EINVALID, "read offset must not be negative")
	}
	if length == 0 {
		fi, err := c.Stat(ctx, "", computerID, p)
		if err != nil {
			return nil, nil, err
		} else if fi.Type == bothy.FileTypeDir {
			return nil, nil, bothy.Errorf(bothy.EISDIR, "%q is a directory", fi.Path)
		}
		return io.NopCloser(strings.NewReader("")), fi, nil
	}
	h := nethttp.Header{}
	if off > 0 || length > 0 {
		end := ""
		if length > 0 {
			end = strconv.FormatInt(off+length-1, 10)
		}
		h.Set("Range", fmt.Sprintf("bytes=%d-%s", off, end))
	}
	resp, err := c.do(ctx, request{method: "GET", path: filePath(computerID, p), header: h})
	if err != nil {
		return nil, nil, err
	}
	fi, err := headerInfo(resp.Header)
	if err != nil {
		resp.Body.Close()
		return nil, nil, err
	}
	if resp.StatusCode == nethttp.StatusRequestedRangeNotSatisfiable {
		// An offset at or past the end gives no bytes.
		resp.Body.Close()
		return io.NopCloser(strings.NewReader("")), fi, nil
	}
	return resp.Body, fi, nil
}

// headerInfo rebuilds the FileInfo of a read from its X-Bothy headers.
func headerInfo(h nethttp.Header) (*bothy.FileInfo, error) {
	p := h.Get(headerPath)
	mode, err1 := strconv.ParseUint(h.Get(headerMode), 8, 32)
	size, err2 := strconv.ParseInt(h.Get(headerSize), 10, 64)
	if p == "" || err1 != nil || err2 != nil {
		return nil, bothy.Errorf(bothy.EINTERNAL, "read file: response lacks the X-Bothy file headers")
	}
	fi := &bothy.FileInfo{Path: p, Name: p[strings.LastIndex(p, "/")+1:], Type: bothy.FileTypeFile, Mode: fs.FileMode(mode), Size: size}
	if t, err := time.Parse(time.RFC3339Nano, h.Get(headerModTime)); err == nil && !t.IsZero() {
		fi.ModTime = t
	}
	return fi, nil
}

// WriteFile streams r as the new content of the file.
func (c *Client) WriteFile(ctx context.Context, _, computerID, p string, r io.Reader, opts bothy.WriteOptions) (*bothy.Revision, error) {
	q := url.Values{}
	if opts.Mode != 0 {
		q.Set("mode", fmt.Sprintf("%04o", opts.Mode.Perm()))
	}
	if opts.Exclusive {
		q.Set("exclusive", "1")
	}
	if opts.MkdirParents {
		q.Set("parents", "1")
	}
	if r == nil {
		r = strings.NewReader("")
	}
	h := nethttp.Header{"Content-Type": {"application/octet-stream"}}
	var rev bothy.Revision
	err := c.call(ctx, request{method: "PUT", path: filePath(computerID, p), query: q, header: h, body: io.NopCloser(r)}, &rev)
	if err != nil {
		return nil, err
	}
	return &rev, nil
}

// Stat describes p, following a final symlink.
func (c *Client) Stat(ctx context.Context, _, computerID, p string) (*bothy.FileInfo, error) {
	return c.statCall(ctx, computerID, "/fs/stat", p)
}

// Lstat describes p without following a final symlink.
func (c *Client) Lstat(ctx context.Context, _, computerID, p string) (*bothy.FileInfo, error) {
	return c.statCall(ctx, computerID, "/fs/lstat", p)
}

func (c *Client) statCall(ctx context.Context, computerID, route, p string) (*bothy.FileInfo, error) {
	var fi bothy.FileInfo
	err := c.call(ctx, request{method: "GET", path: computerPath(computerID, route), query: url.Values{"path": {p}}}, &fi)
	if err != nil {
		return nil, err
	}
	return &fi, nil
}

// ReadDir lists a directory.
func (c *Client) ReadDir(ctx context.Context, _, computerID, p string, opts bothy.ReadDirOptions) ([]*bothy.FileInfo, error) {
	q := url.Values{"path": {p}}
	setPage(q, opts.Offset, opts.Limit)
	var out EntryList
	if err := c.call(ctx, request{method: "GET", path: computerPath(computerID, "/fs/list"), query: q}, &out); err != nil {
		return nil, err
	}
	return out.Entries, nil
}

// Glob returns up to limit paths matching pattern.
func (c *Client) Glob(ctx context.Context, _, computerID, pattern string, limit int) ([]*bothy.FileInfo, error) {
	q := url.Values{"pattern": {pattern}}
	setPage(q, 0, limit)
	var out EntryList
	if err := c.call(ctx, request{method: "GET", path: computerPath(computerID, "/fs/glob"), query: q}, &out); err != nil {
		return nil, err
	}
	return out.Entries, nil
}

// Grep searches the workspace's text files.
func (c *Client) Grep(ctx context.Context, _, computerID string, opts bothy.GrepOptions) (*bothy.GrepResult, error) {
	var out bothy.GrepResult
	if err := c.call(ctx, request{method: "POST", path: computerPath(computerID, "/fs/grep"), json: opts}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Readlink returns a symlink's target.
func (c *Client) Readlink(ctx context.Context, _, computerID, p string) (string, error) {
	var out ReadlinkResponse
	err := c.call(ctx, request{method: "GET", path: computerPath(computerID, "/fs/readlink"), query: url.Values{"path": {p}}}, &out)
	return out.Target, err
}

// mutate posts a JSON body to a file mutation route and returns the revision.
func (c *Client) mutate(ctx context.Context, computerID, route string, body any) (*bothy.Revision, error) {
	var rev bothy.Revision
	if err := c.call(ctx, request{method: "POST", path: computerPath(computerID, route), json: body}, &rev); err != nil {
		return nil, err
	}
	return &rev, nil
}

// Mkdir creates a directory.
func (c *Client) Mkdir(ctx context.Context, _, computerID, p string, opts bothy.MkdirOptions) (*bothy.Revision, error) {
	return c.mutate(ctx, computerID, "/fs/mkdir", MkdirRequest{Path: p, Mode: opts.Mode, Parents: opts.Parents})
}

// Remove removes a path.
func (c *Client) Remove(ctx context.Context, _, computerID, p string, opts bothy.RemoveOptions) (*bothy.Revision, error) {
	return c.mutate(ctx, computerID, "/fs/rm", RemoveRequest{Path: p, Recursive: opts.Recursive, Force: opts.Force})
}

// Rename moves a path.
func (c *Client) Rename(ctx context.Context, _, computerID, from, to string) (*bothy.Revision, error) {
	return c.mutate(ctx, computerID, "/fs/rename", RenameRequest{From: from, To: to})
}

// Symlink creates a symlink at p holding target.
func (c *Client) Symlink(ctx context.Context, _, computerID, target, p string) (*bothy.Revision, error) {
	return c.mutate(ctx, computerID, "/fs/symlink", SymlinkRequest{Target: target, Path: p})
}

// Chmod sets the permission bits of p.
func (c *Client) Chmod(ctx context.Context, _, computerID, p string, mode fs.FileMode) (*bothy.Revision, error) {
	return c.mutate(ctx, computerID, "/fs/chmod", ChmodRequest{Path: p, Mode: mode})
}

// Apply commits a batch of operations as one revision.
func (c *Client) Apply(ctx context.Context, _, computerID string, ops []bothy.FileOp) (*bothy.Revision, error) {
	return c.mutate(ctx, computerID, "/fs/ops", OpsRequest{Ops: ops})
}

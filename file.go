package bothy

import (
	"context"
	"io"
	"io/fs"
	"time"
)

// File types reported in FileInfo.Type.
const (
	FileTypeFile    = "file"
	FileTypeDir     = "dir"
	FileTypeSymlink = "symlink"
)

// File operations of a FileOp batch.
const (
	FileOpWrite   = "write"
	FileOpMkdir   = "mkdir"
	FileOpRemove  = "rm"
	FileOpRename  = "rename"
	FileOpSymlink = "symlink"
	FileOpChmod   = "chmod"
)

// FileInfo describes one file, directory or symlink of a workspace.
type FileInfo struct {
	// Path is the canonical workspace-relative slash path ("." for the root).
	Path string `json:"path"`
	// Name is the last element of Path ("." for the root).
	Name string `json:"name"`
	Type string `json:"type"` // FileTypeFile, FileTypeDir or FileTypeSymlink
	// Mode holds permission bits only (0o777).
	Mode fs.FileMode `json:"mode"`
	// Size is the content length of a file, the target length of a symlink, 0 for a directory.
	Size int64 `json:"size"`
	// ModTime is the last write of a file or symlink; zero for directories,
	// whose times a workspace does not keep.
	ModTime time.Time `json:"mod_time"`
	Target  string    `json:"target,omitempty"` // symlinks only, verbatim
}

// ReadDirOptions pages a directory listing, which is sorted by name.
type ReadDirOptions struct {
	Offset int
	Limit  int // 0 means no limit
}

// WriteOptions control WriteFile and write operations of a batch.
type WriteOptions struct {
	// Mode is the permission bits of the file. 0 keeps the mode of a file
	// being replaced, and gives a new file 0o644.
	Mode fs.FileMode `json:"mode,omitempty"`
	// Exclusive fails with ECONFLICT if anything (even a dangling symlink)
	// exists at the path.
	Exclusive bool `json:"exclusive,omitempty"`
	// MkdirParents creates missing parent directories (mode 0o755).
	MkdirParents bool `json:"mkdir_parents,omitempty"`
}

// MkdirOptions control Mkdir.
type MkdirOptions struct {
	Mode    fs.FileMode `json:"mode,omitempty"`    // 0 means 0o755
	Parents bool        `json:"parents,omitempty"` // like mkdir -p: create parents, an existing directory is fine
}

// RemoveOptions control Remove.
type RemoveOptions struct {
	Recursive bool `json:"recursive,omitempty"` // remove a non-empty directory and everything in it
	Force     bool `json:"force,omitempty"`     // a missing path is not an error
}

// GrepOptions select what Grep searches and returns.
type GrepOptions struct {
	Pattern    string `json:"pattern"`               // an RE2 regular expression, or text if Literal
	Literal    bool   `json:"literal,omitempty"`     // Pattern is plain text
	IgnoreCase bool   `json:"ignore_case,omitempty"` // match case-insensitively
	Context    int    `json:"context,omitempty"`     // lines of context before and after each match
	Limit      int    `json:"limit,omitempty"`       // maximum matches; 0 means a default of 1000, and at most 10,000
	// Include keeps only files matching this glob: against the base name if
	// it holds no '/', else against the workspace-relative path ('**' allowed).
	Include string `json:"include,omitempty"`
	// Path is the file or directory to search; "" means the whole workspace.
	Path string `json:"path,omitempty"`
}

// GrepMatch is one matching line.
type GrepMatch struct {
	Path   string   `json:"path"`
	Line   int      `json:"line"` // 1-based
	Text   string   `json:"text"` // the line without its newline
	Before []string `json:"before,omitempty"`
	After  []string `json:"after,omitempty"`
}

// GrepResult is the outcome of a Grep.
type GrepResult struct {
	Matches []GrepMatch `json:"matches"`
	// Truncated reports that the search stopped early, at the match limit,
	// the cap on bytes scanned or the cap on text returned (16 MiB, context
	// lines included), so more matches may exist.
	Truncated    bool  `json:"truncated,omitempty"`
	FilesScanned int64 `json:"files_scanned"`
	BytesScanned int64 `json:"bytes_scanned"`
}

// FileOp is one operation of a batch given to Apply. Op selects which
// fields are used:
//
//	write:   Path, Data, Mode, Exclusive, Parents (as WriteOptions.MkdirParents)
//	mkdir:   Path, Mode, Parents
//	rm:      Path, Recursive, Force
//	rename:  Path (from), To
//	symlink: Path (the link), Target
//	chmod:   Path, Mode
type FileOp struct {
	Op        string      `json:"op"`
	Path      string      `json:"path"`
	To        string      `json:"to,omitempty"`
	Target    string      `json:"target,omitempty"`
	Data      []byte      `json:"data,omitempty"`
	Mode      fs.FileMode `json:"mode,omitempty"`
	Exclusive bool        `json:"exclusive,omitempty"`
	Parents   bool        `json:"parents,omitempty"`
	Recursive bool        `json:"recursive,omitempty"`
	Force     bool        `json:"force,omitempty"`
}

// FileService reads and changes the files of a computer's workspace. The
// same interface serves a cold computer (package workspace, against the
// committed revision) and an active one (through its runtime).
//
// Paths are workspace-relative slash paths; a leading '/' names the
// workspace root, and "", "/" and "." all mean the root. A path that would
// escape the workspace ("..", or a symlink pointing outside it), holds NUL,
// has a name over 255 bytes or is over 4096 bytes is EINVALIDPATH, and so
// is a symlink loop. Symlinks in the middle of a path are followed while
// they stay inside the workspace.
//
// Every method returns ENOTFOUND for a computer that does not exist or
// belongs to another tenant, and for a missing path. A path component that
// is not a directory is ENOTDIR.
//
// Each successful mutation commits exactly one new revision and returns it;
// a mutation that would leave the workspace unchanged (mkdir -p of an
// existing directory, rm -f of a missing path, chmod to the same mode)
// commits nothing and returns the current revision. A failed mutation
// commits nothing. Concurrent mutations are serialised by compare-and-swap
// and retried; ECONFLICT is returned when they keep losing.
type FileService interface {
	// ReadFile streams length bytes from offset off of a file (length < 0:
	// to the end; an offset at or past the end gives no bytes). A final
	// symlink is followed. A directory is EISDIR; a negative offset is
	// EINVALID. The caller closes the reader.
	ReadFile(ctx context.Context, tenantID, computerID, path string, off, length int64) (io.ReadCloser, *FileInfo, error)
	// WriteFile creates or replaces a file with the content of r. A final
	// symlink is followed when it points inside the workspace. A missing
	// parent is ENOTFOUND unless opts.MkdirParents; a directory at path is
	// EISDIR; an existing path with opts.Exclusive is ECONFLICT; content over
	// the size limit is ETOOLARGE.
	WriteFile(ctx context.Context, tenantID, computerID, path string, r io.Reader, opts WriteOptions) (*Revision, error)
	// Stat describes path, following a final symlink.
	Stat(ctx context.Context, tenantID, computerID, path string) (*FileInfo, error)
	// Lstat describes path without following a final symlink.
	Lstat(ctx context.Context, tenantID, computerID, path string) (*FileInfo, error)
	// ReadDir lists a directory sorted by name. A file is ENOTDIR.
	ReadDir(ctx context.Context, tenantID, computerID, path string, opts ReadDirOptions) ([]*FileInfo, error)
	// Glob returns up to limit paths (0 means a default of 1000, and at most
	// 10,000) matching pattern: path.Match syntax per
	// element, plus '**' for any number of directories (at most 8 in one
	// pattern). Symlinks are matched but not descended into. A bad pattern is
	// EINVALID.
	Glob(ctx context.Context, tenantID, computerID, pattern string, limit int) ([]*FileInfo, error)
	// Grep searches the text files under opts.Path; binary files (a NUL in
	// the first 8 KiB) are skipped, and symlinks are not followed. A bad
	// pattern is EINVALID.
	Grep(ctx context.Context, tenantID, computerID string, opts GrepOptions) (*GrepResult, error)
	// Mkdir creates a directory. An existing path is ECONFLICT; with
	// opts.Parents an existing directory is fine (and commits nothing) and
	// anything else at path is ENOTDIR. A missing parent is ENOTFOUND unless
	// opts.Parents.
	Mkdir(ctx context.Context, tenantID, computerID, path string, opts MkdirOptions) (*Revision, error)
	// Remove removes a file, symlink (never its target) or directory. A
	// non-empty directory is ENOTEMPTY unless opts.Recursive; a missing path
	// is ENOTFOUND unless opts.Force; the root is EINVALID.
	Remove(ctx context.Context, tenantID, computerID, path string, opts RemoveOptions) (*Revision, error)
	// Rename moves a file, symlink or directory, like rename(2): an existing
	// file or symlink at to is replaced, an empty directory is replaced by a
	// directory, a non-empty one is ENOTEMPTY; a file onto a directory is
	// EISDIR, a directory onto a file ENOTDIR; a directory into itself, or
	// the root, is EINVALID. Final symlinks are not followed.
	Rename(ctx context.Context, tenantID, computerID, from, to string) (*Revision, error)
	// Symlink creates a symlink at path holding target verbatim; the target
	// may dangle or point anywhere, but is only ever followed inside the
	// workspace. An existing path is ECONFLICT; an empty target or one with
	// NUL is EINVALID.
	Symlink(ctx context.Context, tenantID, computerID, target, path string) (*Revision, error)
	// Readlink returns a symlink's target. Anything else is EINVALID.
	Readlink(ctx context.Context, tenantID, computerID, path string) (string, error)
	// Chmod sets the permission bits (mode & 0o777) of path, following a
	// final symlink. The root is EINVALID.
	Chmod(ctx context.Context, tenantID, computerID, path string, mode fs.FileMode) (*Revision, error)
	// Apply runs ops in order and commits them as one revision, or commits
	// nothing if any op fails; the error names the failing op's index and
	// keeps its code. An empty batch or an unknown op is EINVALID, more ops
	// than the batch limit ETOOLARGE.
	Apply(ctx context.Context, tenantID, computerID string, ops []FileOp) (*Revision, error)
}

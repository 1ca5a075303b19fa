package http

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	nethttp "net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
)

// Headers that describe the file of a read, so that a client rebuilds its
// bothy.FileInfo without a second request.
const (
	headerPath    = "X-Bothy-Path"
	headerMode    = "X-Bothy-Mode"     // octal permission bits, such as 0644
	headerSize    = "X-Bothy-Size"     // the whole file's size, even for a range
	headerModTime = "X-Bothy-Mod-Time" // RFC 3339 with nanoseconds
)

// EntryList is the body of a directory listing or a glob.
type EntryList struct {
	Entries []*bothy.FileInfo `json:"entries"`
}

// Request bodies of the file mutations. Modes are JSON integers holding
// permission bits (420 is 0644); 0 means the operation's default.
type (
	MkdirRequest struct {
		Path    string      `json:"path"`
		Mode    fs.FileMode `json:"mode,omitempty"`
		Parents bool        `json:"parents,omitempty"`
	}
	RemoveRequest struct {
		Path      string `json:"path"`
		Recursive bool   `json:"recursive,omitempty"`
		Force     bool   `json:"force,omitempty"`
	}
	RenameRequest struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
	SymlinkRequest struct {
		Target string `json:"target"`
		Path   string `json:"path"`
	}
	ChmodRequest struct {
		Path string      `json:"path"`
		Mode fs.FileMode `json:"mode"`
	}
	// OpsRequest is a batch committed as one revision. A write's data is
	// base64 in JSON.
	OpsRequest struct {
		Ops []bothy.FileOp `json:"ops"`
	}
	// ReadlinkResponse holds a symlink's target.
	ReadlinkResponse struct {
		Target string `json:"target"`
	}
)

func (s *Server) handleReadFile(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	ctx, id, path := r.Context(), r.PathValue("id"), r.PathValue("path")
	off, length, partial := int64(0), int64(-1), false
	if rg, ok := parseRange(r.Header.Get("Range")); ok {
		partial = true
		off, length = rg.start, rg.length
		if rg.suffix {
			fi, err := s.files.Stat(ctx, p.TenantID, id, path)
			if err != nil {
				return err
			}
			off, length = max(0, fi.Size-rg.length), rg.length
		}
	}
	rc, fi, err := s.files.ReadFile(ctx, p.TenantID, id, path, off, length)
	if err != nil {
		return err
	}
	defer rc.Close()
	h := w.Header()
	h.Set(headerPath, fi.Path)
	h.Set(headerMode, fmt.Sprintf("%04o", fi.Mode.Perm()))
	h.Set(headerSize, strconv.FormatInt(fi.Size, 10))
	h.Set(headerModTime, fi.ModTime.Format(time.RFC3339Nano))
	if !fi.ModTime.IsZero() {
		h.Set("Last-Modified", fi.ModTime.UTC().Format(nethttp.TimeFormat))
	}
	h.Set("Accept-Ranges", "bytes")
	status, n := nethttp.StatusOK, fi.Size
	if partial {
		if off >= fi.Size {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", fi.Size))
			writeJSON(w, nethttp.StatusRequestedRangeNotSatisfiable, errorResponse{errorBody{
				Code: bothy.EINVALID, Message: fmt.Sprintf("range starts at or past the end of the %d-byte file", fi.Size)}})
			return nil
		}
		n = fi.Size - off
		if length >= 0 && length < n {
			n = length
		}
		status = nethttp.StatusPartialContent
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, fi.Size))
	}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(status)
	if _, err := io.Copy(w, rc); err != nil && ctx.Err() == nil {
		// The status is sent; the short body tells the client.
		s.log.Error("read file: stream", "computer", id, "path", path, "err", err)
	}
	return nil
}

// byteRange is one range of a Range header: start and length (-1: to the
// end), or the last length bytes if suffix.
type byteRange struct {
	start, length int64
	suffix        bool
}

// parseRange parses a single "bytes=a-b", "bytes=a-" or "bytes=-n". Other
// headers, multiple ranges included, are ignored and the whole file served,
// as RFC 9110 allows.
func parseRange(h string) (byteRange, bool) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return byteRange{}, false
	}
	a, b, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return byteRange{}, false
	}
	if a == "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return byteRange{}, false
		}
		return byteRange{length: n, suffix: true}, true
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start < 0 {
		return byteRange{}, false
	}
	if b == "" {
		return byteRange{start: start, length: -1}, true
	}
	end, err := strconv.ParseInt(b, 10, 64)
	if err != nil || end < start {
		return byteRange{}, false
	}
	return byteRange{start: start, length: end - start + 1}, true
}

func (s *Server) handleWriteFile(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	var opts bothy.WriteOptions
	var err error
	if v := r.URL.Query().Get("mode"); v != "" {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m > 0o777 {
			return bothy.Errorf(bothy.EINVALID, "query parameter mode must be octal permission bits, such as 0644")
		}
		opts.Mode = fs.FileMode(m)
	}
	if opts.Exclusive, err = queryBool(r, "exclusive"); err != nil {
		return err
	} else if opts.MkdirParents, err = queryBool(r, "parents"); err != nil {
		return err
	}
	if r.ContentLength > s.opts.MaxFileSize {
		return bothy.Errorf(bothy.ETOOLARGE, "file is over the limit of %d bytes", s.opts.MaxFileSize)
	}
	body := &bodyReader{r: nethttp.MaxBytesReader(w, r.Body, s.opts.MaxFileSize)}
	rev, err := s.files.WriteFile(r.Context(), p.TenantID, r.PathValue("id"), r.PathValue("path"), body, opts)
	if err != nil {
		return err
	}
	writeJSON(w, nethttp.StatusOK, rev)
	return nil
}

// bodyReader turns the error of a MaxBytesReader into ETOOLARGE.
type bodyReader struct{ r io.Reader }

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if e := tooLarge(err); e != nil {
		return n, e
	}
	return n, err
}

func (s *Server) handleList(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	var opts bothy.ReadDirOptions
	var err error
	if opts.Offset, err = queryInt(r, "offset"); err != nil {
		return err
	} else if opts.Limit, err = queryInt(r, "limit"); err != nil {
		return err
	}
	infos, err := s.files.ReadDir(r.Context(), p.TenantID, r.PathValue("id"), r.URL.Query().Get("path"), opts)
	if err != nil {
		return err
	}
	return writeEntries(w, infos)
}

func writeEntries(w nethttp.ResponseWriter, infos []*bothy.FileInfo) error {
	if infos == nil {
		infos = []*bothy.FileInfo{}
	}
	writeJSON(w, nethttp.StatusOK, EntryList{Entries: infos})
	return nil
}

func (s *Server) handleStat(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	fi, err := s.files.Stat(r.Context(), p.TenantID, r.PathValue("id"), r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	writeJSON(w, nethttp.StatusOK, fi)
	return nil
}

func (s *Server) handleLstat(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	fi, err := s.files.Lstat(r.Context(), p.TenantID, r.PathValue("id"), r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	writeJSON(w, nethttp.StatusOK, fi)
	return nil
}

func (s *Server) handleReadlink(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	target, err := s.files.Readlink(r.Context(), p.TenantID, r.PathValue("id"), r.URL.Query().Get("path"))
	if err != nil {
		return err
	}
	writeJSON(w, nethttp.StatusOK, ReadlinkResponse{Target: target})
	return nil
}

func (s *Server) handleGlob(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	limit, err := queryInt(r, "limit")
	if err != nil {
		return err
	}
	infos, err := s.files.Glob(r.Context(), p.TenantID, r.PathValue("id"), r.URL.Query().Get("pattern"), limit)
	if err != nil {
		return err
	}
	return writeEntries(w, infos)
}

func (s *Server) handleGrep(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	var opts bothy.GrepOptions
	if err := s.readJSON(w, r, s.opts.MaxJSONSize, &opts); err != nil {
		return err
	}
	res, err := s.files.Grep(r.Context(), p.TenantID, r.PathValue("id"), opts)
	if err != nil {
		return err
	}
	if res.Matches == nil {
		res.Matches = []bothy.GrepMatch{}
	}
	writeJSON(w, nethttp.StatusOK, res)
	return nil
}

// mutation decodes a JSON body of type T and writes the revision that do
// commits.
func mutation[T any](s *Server, max int64, do func(r *nethttp.Request, p *bothy.Principal, req *T) (*bothy.Revision, error)) func(nethttp.ResponseWriter, *nethttp.Request, *bothy.Principal) error {
	return func(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
		var req T
		if err := s.readJSON(w, r, max, &req); err != nil {
			return err
		}
		rev, err := do(r, p, &req)
		if err != nil {
			return err
		}
		writeJSON(w, nethttp.StatusOK, rev)
		return nil
	}
}

func (s *Server) handleMkdir(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	return mutation(s, s.opts.MaxJSONSize, func(r *nethttp.Request, p *bothy.Principal, req *MkdirRequest) (*bothy.Revision, error) {
		return s.files.Mkdir(r.Context(), p.TenantID, r.PathValue("id"), req.Path, bothy.MkdirOptions{Mode: req.Mode, Parents: req.Parents})
	})(w, r, p)
}

func (s *Server) handleRemove(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	return mutation(s, s.opts.MaxJSONSize, func(r *nethttp.Request, p *bothy.Principal, req *RemoveRequest) (*bothy.Revision, error) {
		return s.files.Remove(r.Context(), p.TenantID, r.PathValue("id"), req.Path, bothy.RemoveOptions{Recursive: req.Recursive, Force: req.Force})
	})(w, r, p)
}

func (s *Server) handleRename(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	return mutation(s, s.opts.MaxJSONSize, func(r *nethttp.Request, p *bothy.Principal, req *RenameRequest) (*bothy.Revision, error) {
		return s.files.Rename(r.Context(), p.TenantID, r.PathValue("id"), req.From, req.To)
	})(w, r, p)
}

func (s *Server) handleSymlink(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	return mutation(s, s.opts.MaxJSONSize, func(r *nethttp.Request, p *bothy.Principal, req *SymlinkRequest) (*bothy.Revision, error) {
		return s.files.Symlink(r.Context(), p.TenantID, r.PathValue("id"), req.Target, req.Path)
	})(w, r, p)
}

func (s *Server) handleChmod(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	return mutation(s, s.opts.MaxJSONSize, func(r *nethttp.Request, p *bothy.Principal, req *ChmodRequest) (*bothy.Revision, error) {
		return s.files.Chmod(r.Context(), p.TenantID, r.PathValue("id"), req.Path, req.Mode)
	})(w, r, p)
}

// handleOps decodes a batch one operation at a time, so that a batch of
// more than MaxOps operations is refused before the rest is read.
func (s *Server) handleOps(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	var req OpsRequest
	if err := s.decodeJSON(w, r, s.opts.MaxOpsSize, func(dec *json.Decoder) error { return decodeOps(dec, s.opts.MaxOps, &req) }); err != nil {
		return err
	}
	rev, err := s.files.Apply(r.Context(), p.TenantID, r.PathValue("id"), req.Ops)
	if err != nil {
		return err
	}
	writeJSON(w, nethttp.StatusOK, rev)
	return nil
}

// decodeOps decodes an OpsRequest from dec as json.Decoder.Decode would,
// unknown fields refused, but ETOOLARGE at operation max+1.
func decodeOps(dec *json.Decoder, max int, req *OpsRequest) error {
	if err := wantDelim(dec, '{', "a JSON object"); err != nil {
		return err
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		} else if k, _ := t.(string); !strings.EqualFold(k, "ops") {
			return bothy.Errorf(bothy.EINVALID, "request body: json: unknown field %q", k)
		}
		if t, err = dec.Token(); err != nil {
			return err
		} else if t == nil {
			req.Ops = nil
			continue
		} else if t != json.Delim('[') {
			return bothy.Errorf(bothy.EINVALID, "request body: ops must be an array")
		}
		req.Ops = req.Ops[:0]
		for dec.More() {
			if len(req.Ops) == max {
				return bothy.Errorf(bothy.ETOOLARGE, "batch has more than %d operations, the limit", max)
			}
			var op bothy.FileOp
			if err := dec.Decode(&op); err != nil {
				return err
			}
			req.Ops = append(req.Ops, op)
		}
		if err := wantDelim(dec, ']', "the end of ops"); err != nil {
			return err
		}
	}
	return wantDelim(dec, '}', "the end of the object")
}

// wantDelim reads the next token of dec, which must be d.
func wantDelim(dec *json.Decoder, d json.Delim, what string) error {
	t, err := dec.Token()
	if err != nil {
		return err
	} else if t != d {
		return bothy.Errorf(bothy.EINVALID, "request body: want %s", what)
	}
	return nil
}

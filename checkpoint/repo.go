package checkpoint

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"sync"
	"time"

	"github.com/bothyhq/bothy"
)

// Repo is one tenant's objects in one BlobStore. Pack keys are
// "packs/<tenantID>/<packhash>". A Repo caches the blob tables of the packs
// it has read (packs are immutable) and recently decoded frames; it is safe
// for concurrent use.
type Repo struct {
	blobs    bothy.BlobStore
	tenantID string
	hs       *hasher
	now      func() time.Time
	empty    Hash // digest of the empty tree, which is never stored

	mu     sync.Mutex
	tables map[string]*packTable
	frames *frameCache
}

// NewRepo returns the repository of tenantID in blobs; hashKey is the
// tenant's 32-byte Tenant.HashKey.
func NewRepo(blobs bothy.BlobStore, tenantID string, hashKey []byte) (*Repo, error) {
	if err := bothy.ValidateID("tenant id", tenantID); err != nil {
		return nil, err
	}
	hs, err := newHasher(hashKey)
	if err != nil {
		return nil, err
	}
	r := &Repo{blobs: blobs, tenantID: tenantID, hs: hs, now: time.Now,
		tables: map[string]*packTable{}, frames: newFrameCache(64 << 20)}
	r.empty = r.Hash((&Tree{}).Encode())
	return r, nil
}

// Hash returns the keyed BLAKE3 digest of b.
func (r *Repo) Hash(b []byte) Hash { return r.hs.sum(b) }

// EmptyTree returns the digest of the empty tree, the root of an empty
// workspace. It is never stored in a pack.
func (r *Repo) EmptyTree() Hash { return r.empty }

// location is where an object lives: a row of a pack table.
type location struct {
	table *packTable
	i     int32
}

func (l location) entry() *packEntry { return &l.table.entries[l.i] }

// Snapshot is read access to one revision.
type Snapshot struct {
	repo  *Repo
	root  Hash
	packs []string
	index map[Hash]location
}

// OpenRevision opens revision number of a computer of the repo's tenant, as
// recorded in revs; number 0 is the empty workspace, for which the returned
// revision is nil.
func (r *Repo) OpenRevision(ctx context.Context, revs bothy.RevisionService, computerID string, number int64) (*Snapshot, *bothy.Revision, error) {
	if number == 0 {
		s, err := r.Open(ctx, "", nil)
		return s, nil, err
	}
	rev, err := revs.FindRevision(ctx, r.tenantID, computerID, number)
	if err != nil {
		return nil, nil, fmt.Errorf("find revision: %w", err)
	}
	s, err := r.Open(ctx, rev.RootDigest, rev.Packs)
	if err != nil {
		return nil, nil, fmt.Errorf("open revision %d: %w", number, err)
	}
	return s, rev, nil
}

// Open gives read access to one revision: root is Revision.RootDigest (""
// is the empty workspace, an empty root tree) and packs is Revision.Packs.
// Open loads the blob tables of the packs, in parallel, from the Repo's cache
// when it can.
func (r *Repo) Open(ctx context.Context, root string, packs []string) (*Snapshot, error) {
	s := &Snapshot{repo: r, root: r.empty, packs: sortedUnique(packs)}
	if root != "" {
		h, err := ParseHash(root)
		if err != nil {
			return nil, err
		}
		s.root = h
	}
	tables, err := r.loadTables(ctx, s.packs)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, t := range tables {
		n += len(t.entries)
	}
	s.index = make(map[Hash]location, n)
	for _, t := range tables {
		for i := range t.entries {
			s.index[t.entries[i].hash] = location{t, int32(i)}
		}
	}
	if _, ok := s.index[s.root]; !ok && s.root != r.empty {
		return nil, bothy.Errorf(bothy.ECORRUPT, "open snapshot: root tree %s is in none of its %d packs", s.root, len(s.packs))
	}
	return s, nil
}

// Root returns the root tree digest.
func (s *Snapshot) Root() Hash { return s.root }

// Packs returns the packs of the snapshot, sorted.
func (s *Snapshot) Packs() []string { return append([]string(nil), s.packs...) }

// Repo returns the repository the snapshot belongs to.
func (s *Snapshot) Repo() *Repo { return s.repo }

// Has reports whether the snapshot's packs hold object h.
func (s *Snapshot) Has(h Hash) bool {
	_, ok := s.index[h]
	return ok || h == s.repo.empty
}

func sortedUnique(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	j := 0
	for i, p := range out {
		if i == 0 || p != out[j-1] {
			out[j] = p
			j++
		}
	}
	return out[:j]
}

// loadTables returns the blob tables of packs, reading missing ones with a
// few workers.
func (r *Repo) loadTables(ctx context.Context, packs []string) ([]*packTable, error) {
	out := make([]*packTable, len(packs))
	var todo []int
	r.mu.Lock()
	for i, p := range packs {
		if t, ok := r.tables[p]; ok {
			out[i] = t
		} else {
			todo = append(todo, i)
		}
	}
	r.mu.Unlock()
	err := parallel(ctx, len(todo), 8, func(ctx context.Context, j int) error {
		i := todo[j]
		t, err := r.readTable(ctx, packs[i])
		if err != nil {
			return err
		}
		out[i] = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	for _, i := range todo {
		r.tables[packs[i]] = out[i]
	}
	r.mu.Unlock()
	return out, nil
}

// readTable reads the tail of a pack: one ranged read, or two when the table
// is larger than the first guess.
func (r *Repo) readTable(ctx context.Context, name string) (*packTable, error) {
	if _, err := ParseHash(name); err != nil {
		return nil, bothy.Errorf(bothy.EINVALID, "pack name %q is not a hash", name)
	}
	key := packKey(r.tenantID, name)
	info, err := r.blobs.StatBlob(ctx, key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, bothy.Errorf(bothy.ECORRUPT, "pack %s is missing", name)
	} else if err != nil {
		return nil, fmt.Errorf("stat pack %s: %w", name, err)
	}
	if info.Size < footerSize {
		return nil, bothy.Errorf(bothy.ECORRUPT, "pack %s: too short", name)
	}
	guess := min(info.Size, 256<<10)
	tail, err := r.readRange(ctx, key, info.Size-guess, guess)
	if err != nil {
		return nil, fmt.Errorf("read pack table %s: %w", name, err)
	}
	th, tlen, count, err := parseFooter(tail[len(tail)-footerSize:])
	if err != nil || int64(tlen)+footerSize > info.Size {
		return nil, bothy.Errorf(bothy.ECORRUPT, "pack %s: bad footer", name)
	}
	if int64(tlen)+footerSize > guess {
		tail, err = r.readRange(ctx, key, info.Size-int64(tlen)-footerSize, int64(tlen)+footerSize)
		if err != nil {
			return nil, fmt.Errorf("read pack table %s: %w", name, err)
		}
	}
	table := tail[len(tail)-footerSize-tlen : len(tail)-footerSize]
	if r.hs.sum(table) != th {
		return nil, bothy.Errorf(bothy.ECORRUPT, "pack %s: blob table hash mismatch", name)
	}
	entries, err := parseTable(table, count, info.Size)
	if err != nil {
		return nil, bothy.Errorf(bothy.ECORRUPT, "pack %s: %v", name, err)
	}
	return &packTable{name: name, size: info.Size, entries: entries}, nil
}

func (r *Repo) readRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	rc, err := r.blobs.GetBlob(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(rc, b); err != nil {
		return nil, err
	}
	return b, nil
}

// frame returns the decoded frame holding e, from the cache when it can.
func (r *Repo) frame(ctx context.Context, t *packTable, e *packEntry) ([]byte, error) {
	k := frameKey{t.name, e.frameOff}
	if b, ok := r.frames.get(k); ok {
		return b, nil
	}
	raw, err := r.readRange(ctx, packKey(r.tenantID, t.name), e.frameOff, e.frameLen)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, bothy.Errorf(bothy.ECORRUPT, "pack %s is missing", t.name)
	} else if err != nil {
		return nil, fmt.Errorf("read pack %s: %w", t.name, err)
	}
	b, err := decodeFrame(raw, e.zstd, nil)
	if err != nil {
		return nil, corruptf(e.hash, t.name, "decompress frame at %d: %v", e.frameOff, err)
	}
	r.frames.put(k, b)
	return b, nil
}

// get returns the verified bytes of object h. The result may be shared with
// the frame cache: callers must not modify it.
func (s *Snapshot) get(ctx context.Context, h Hash) ([]byte, error) {
	if h == s.repo.empty {
		return (&Tree{}).Encode(), nil
	}
	loc, ok := s.index[h]
	if !ok {
		return nil, bothy.Errorf(bothy.ECORRUPT, "object %s is in none of the snapshot's packs", h)
	}
	e := loc.entry()
	frame, err := s.repo.frame(ctx, loc.table, e)
	if err != nil {
		return nil, err
	}
	if e.off+e.length > int64(len(frame)) {
		return nil, corruptf(h, loc.table.name, "blob beyond its frame")
	}
	b := frame[e.off : e.off+e.length]
	if s.repo.hs.sum(b) != h {
		return nil, corruptf(h, loc.table.name, "hash mismatch")
	}
	return b, nil
}

// Tree returns the verified tree object h.
func (s *Snapshot) Tree(ctx context.Context, h Hash) (*Tree, error) {
	b, err := s.get(ctx, h)
	if err != nil {
		return nil, err
	}
	t, err := DecodeTree(b)
	if err != nil {
		return nil, bothy.Errorf(bothy.ECORRUPT, "tree %s: %s", h, bothy.ErrorMessage(err))
	}
	return t, nil
}

// OpenFile streams bytes [off, off+length) of a file entry (length < 0: to
// the end), fetching only the chunks that overlap the range and verifying
// each chunk's hash.
func (s *Snapshot) OpenFile(ctx context.Context, e *Entry, off, length int64) (io.ReadCloser, error) {
	if e.Type != TypeFile {
		return nil, bothy.Errorf(bothy.EISDIR, "open file %q: not a regular file", e.Name)
	}
	if off < 0 {
		return nil, bothy.Errorf(bothy.EINVALID, "open file %q: negative offset", e.Name)
	}
	end := e.Size
	if length >= 0 && off+length < end {
		end = off + length
	}
	return &fileReader{ctx: ctx, s: s, chunks: e.Chunks, pos: off, end: end}, nil
}

type fileReader struct {
	ctx      context.Context
	s        *Snapshot
	chunks   []Chunk
	pos, end int64
	base     int64 // file offset of chunks[0]
	cur      []byte
}

func (f *fileReader) Read(p []byte) (int, error) {
	for len(f.cur) == 0 {
		if f.pos >= f.end {
			return 0, io.EOF
		}
		for len(f.chunks) > 0 && f.base+f.chunks[0].Size <= f.pos {
			f.base += f.chunks[0].Size
			f.chunks = f.chunks[1:]
		}
		if len(f.chunks) == 0 {
			return 0, io.EOF
		}
		if c := f.chunks[0]; c.Hole() {
			// A hole reads as zeros, a page at a time.
			n := min(int64(len(zeros)), f.base+c.Size-f.pos, f.end-f.pos)
			f.cur = zeros[:n]
			break
		}
		b, err := f.s.get(f.ctx, f.chunks[0].Hash)
		if err != nil {
			return 0, err
		}
		if int64(len(b)) != f.chunks[0].Size {
			return 0, bothy.Errorf(bothy.ECORRUPT, "chunk %s: size %d, want %d", f.chunks[0].Hash, len(b), f.chunks[0].Size)
		}
		b = b[f.pos-f.base:]
		if rest := f.end - f.pos; int64(len(b)) > rest {
			b = b[:rest]
		}
		f.cur = b
	}
	n := copy(p, f.cur)
	f.cur = f.cur[n:]
	f.pos += int64(n)
	return n, nil
}

func (f *fileReader) Close() error { f.cur = nil; f.chunks = nil; return nil }

// frameCache keeps recently decoded frames, bounded by total bytes.
type frameCache struct {
	mu    sync.Mutex
	max   int
	size  int
	lru   *list.List
	items map[frameKey]*list.Element
}

type frameKey struct {
	pack string
	off  int64
}

type frameItem struct {
	k frameKey
	b []byte
}

func newFrameCache(max int) *frameCache {
	return &frameCache{max: max, lru: list.New(), items: map[frameKey]*list.Element{}}
}

func (c *frameCache) get(k frameKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		c.lru.MoveToFront(el)
		return el.Value.(*frameItem).b, true
	}
	return nil, false
}

func (c *frameCache) put(k frameKey, b []byte) {
	if len(b) > c.max/8 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[k]; ok {
		return
	}
	c.items[k] = c.lru.PushFront(&frameItem{k, b})
	c.size += len(b)
	for c.size > c.max {
		el := c.lru.Back()
		it := el.Value.(*frameItem)
		c.lru.Remove(el)
		delete(c.items, it.k)
		c.size -= len(it.b)
	}
}

// parallel runs fn(i) for i in [0, n) on at most workers goroutines and
// returns the first error; it stops handing out work after an error.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu   sync.Mutex
		next int
		ferr error
		wg   sync.WaitGroup
	)
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := ferr != nil || i >= n
				mu.Unlock()
				if stop {
					return
				}
				if err := ctx.Err(); err != nil {
					mu.Lock()
					if ferr == nil {
						ferr = err
					}
					mu.Unlock()
					return
				}
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if ferr == nil {
						ferr = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	return ferr
}

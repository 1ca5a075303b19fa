package checkpoint

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/bothyhq/bothy"
)

// MaxCommitAge bounds the time from a Writer's first pack upload to the end
// of Finish (and of Repo.Checkpoint). Past it, Finish refuses to return the
// packs, so that a revision never references a pack that garbage collection
// with the default Grace (2*MaxCommitAge) may have swept. The caller must
// commit within Grace-MaxCommitAge of Finish returning.
const MaxCommitAge = 30 * time.Minute

// DefaultGrace is the age below which GC never deletes a pack.
const DefaultGrace = 2 * MaxCommitAge

// Stats counts what a checkpoint or a Writer did.
type Stats struct {
	Files, Dirs, Symlinks   int64 // scanned entries (checkpoint of a directory)
	FilesRead, BytesRead    int64 // files whose content was read (not served by the stat cache)
	NewBlobs, NewBlobBytes  int64 // new content chunks and their uncompressed bytes
	NewTrees                int64 // new tree objects
	PacksWritten, PackBytes int64 // packs uploaded and their stored bytes
	Skipped                 int64 // sockets, fifos and devices, which are not kept
}

// Writer adds new objects on top of a snapshot, deduplicating against the
// snapshot's packs and against what it already wrote. Nothing is visible to
// others until the caller commits the revision (store.CommitRevision with
// Packs = the result of Finish). A Writer is not safe for concurrent use.
type Writer struct {
	snap *Snapshot
	p    *packer
	buf  []byte
}

// NewWriter returns a Writer whose objects go into new packs.
func (s *Snapshot) NewWriter() *Writer {
	return &Writer{snap: s, p: newPacker(s.repo)}
}

// WriteFile chunks and stores the content of r and returns its chunks.
// Chunks that are all zeros become holes (Chunk.Hole), stored nowhere;
// when r is a regular *os.File at offset 0, its holes are skipped
// without reading them (SEEK_DATA), and it is read to its size.
func (w *Writer) WriteFile(ctx context.Context, r io.Reader) (chunks []Chunk, size int64, err error) {
	if w.buf == nil {
		w.buf = make([]byte, 2*MaxChunkSize)
	}
	yield := func(b []byte, hole int64) error {
		if b == nil {
			chunks = append(chunks, Chunk{Size: hole})
			size += hole
			return nil
		}
		h := w.snap.repo.Hash(b)
		if err := w.add(ctx, h, kindData, b, true); err != nil {
			return err
		}
		chunks = append(chunks, Chunk{h, int64(len(b))})
		size += int64(len(b))
		return nil
	}
	if f, ok := r.(*os.File); ok && atRegularStart(f) {
		err = fileChunks(int(f.Fd()), w.buf, yield)
	} else {
		err = streamChunks(r, w.buf, yield)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("write file: %w", err)
	}
	return chunks, size, nil
}

// atRegularStart reports whether f is a regular file at offset 0.
func atRegularStart(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	off, err := f.Seek(0, io.SeekCurrent)
	return err == nil && off == 0
}

// WriteTree validates, encodes and stores t and returns its digest.
func (w *Writer) WriteTree(ctx context.Context, t *Tree) (Hash, error) {
	if err := t.validate(); err != nil {
		return Hash{}, bothy.Errorf(bothy.EINVALID, "write tree: %v", err)
	}
	b := t.Encode()
	h := w.snap.repo.Hash(b)
	return h, w.add(ctx, h, kindTree, b, false)
}

// add stores a blob unless the snapshot or the writer has it. When shared is
// true, b is reused by the caller and must be copied.
func (w *Writer) add(ctx context.Context, h Hash, kind uint8, b []byte, shared bool) error {
	if w.snap.Has(h) || w.p.has(h) {
		return nil
	}
	if shared {
		b = append([]byte(nil), b...)
	}
	return w.p.add(ctx, h, kind, b)
}

// Finish uploads pending packs (IfNotExist) and returns the pack list for
// the new revision: the snapshot's packs plus the new ones, sorted,
// deduplicated.
func (w *Writer) Finish(ctx context.Context) (packs []string, err error) {
	newPacks, err := w.p.finish(ctx)
	if err != nil {
		return nil, err
	}
	return sortedUnique(append(w.snap.Packs(), newPacks...)), nil
}

// Stats returns the objects and bytes written so far.
func (w *Writer) Stats() Stats { return w.p.stats() }

// packer groups blobs into frames, compresses frames on several goroutines,
// assembles them in order into packs and uploads sealed packs concurrently.
// Blob order alone decides frame and pack bytes, so the same input gives the
// same pack names.
type packer struct {
	repo *Repo

	mu        sync.Mutex
	known     map[Hash]int // new blob -> index in names, or -1 while pending
	names     []string
	st        Stats
	err       error
	firstPut  time.Time
	started   bool
	finished  bool
	cur       *frame // the open frame of small blobs
	work      chan *frame
	order     chan *frame
	assembled chan struct{}
	uploads   sync.WaitGroup
	upSem     chan struct{}
	ctx       context.Context // for uploads, cancelled by a failed finish
	cancel    context.CancelFunc

	// Owned by the assembler goroutine.
	segs    [][]byte // the current pack: its frames, not yet copied together
	packLen int
	entries []packEntry
}

type frame struct {
	blobs []packEntry // hash, kind, off, length
	raw   []byte
	out   []byte
	zstd  bool
	done  chan struct{}
}

func newPacker(r *Repo) *packer {
	return &packer{repo: r, known: map[Hash]int{}}
}

func (p *packer) has(h Hash) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.known[h]
	return ok
}

func (p *packer) stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st
}

func (p *packer) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

func (p *packer) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *packer) start() {
	p.started = true
	n := runtime.GOMAXPROCS(0)
	p.work = make(chan *frame, 2*n)
	p.order = make(chan *frame, 8*n)
	p.assembled = make(chan struct{})
	p.upSem = make(chan struct{}, 3)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	for i := 0; i < n; i++ {
		go compressWorker(p.work)
	}
	go p.assemble()
}

// add appends one blob; the packer owns b afterwards.
func (p *packer) add(ctx context.Context, h Hash, kind uint8, b []byte) error {
	if err := p.failed(); err != nil {
		return err
	}
	if !p.started {
		p.start()
	}
	p.mu.Lock()
	p.known[h] = -1
	if kind == kindData {
		p.st.NewBlobs++
		p.st.NewBlobBytes += int64(len(b))
	} else {
		p.st.NewTrees++
	}
	p.mu.Unlock()
	e := packEntry{hash: h, kind: kind, length: int64(len(b))}
	if len(b) >= largeBlobSize {
		if err := p.flush(ctx); err != nil {
			return err
		}
		return p.emit(ctx, &frame{blobs: []packEntry{e}, raw: b})
	}
	if p.cur == nil {
		p.cur = &frame{raw: make([]byte, 0, MaxFrameSize+largeBlobSize)}
	}
	e.off = int64(len(p.cur.raw))
	p.cur.raw = append(p.cur.raw, b...)
	p.cur.blobs = append(p.cur.blobs, e)
	if len(p.cur.raw) >= MaxFrameSize {
		return p.flush(ctx)
	}
	return nil
}

func (p *packer) flush(ctx context.Context) error {
	if p.cur == nil {
		return nil
	}
	f := p.cur
	p.cur = nil
	return p.emit(ctx, f)
}

func (p *packer) emit(ctx context.Context, f *frame) error {
	f.done = make(chan struct{})
	select {
	case p.order <- f:
	case <-ctx.Done():
		return ctx.Err()
	}
	// The frame is in order, so the assembler may wait on it: hand it to a
	// worker even if ctx ends now.
	p.work <- f
	return nil
}

// probeSize is how much of a large frame is compressed first to tell
// whether the whole is worth compressing.
const probeSize = 64 << 10

func compressWorker(work <-chan *frame) {
	enc, _ := codecs()
	probe := make([]byte, 0, probeSize+probeSize/8)
	for f := range work {
		// A frame of one large blob whose first 64 KiB do not compress
		// (random data, media, archives) is stored raw without compressing
		// the rest. The decision depends on the bytes only, so packs stay
		// deterministic.
		if len(f.raw) >= largeBlobSize {
			probe = enc.EncodeAll(f.raw[:probeSize], probe[:0])
			if len(probe) >= probeSize-probeSize/64 {
				f.out = f.raw
				close(f.done)
				continue
			}
		}
		out := enc.EncodeAll(f.raw, make([]byte, 0, len(f.raw)/2+64))
		if len(out) < len(f.raw)-len(f.raw)/64 {
			f.out, f.zstd = out, true
		} else {
			f.out = f.raw
		}
		close(f.done)
	}
}

// assemble appends frames in order to the current pack and seals it once it
// reaches TargetPackSize.
func (p *packer) assemble() {
	defer close(p.assembled)
	for f := range p.order {
		<-f.done
		off := int64(p.packLen)
		// A pack is uploaded from its frames in place; copying them into one
		// buffer was a tenth of a full checkpoint's CPU time.
		p.segs = append(p.segs, f.out)
		p.packLen += len(f.out)
		for _, e := range f.blobs {
			e.frameOff, e.frameLen, e.zstd = off, int64(len(f.out)), f.zstd
			p.entries = append(p.entries, e)
		}
		if p.packLen >= TargetPackSize {
			p.seal()
		}
	}
	if len(p.entries) > 0 {
		p.seal()
	}
}

// seal finishes the current pack and uploads it in the background.
func (p *packer) seal() {
	segs, entries := p.segs, p.entries
	size := p.packLen
	p.segs, p.entries, p.packLen = nil, nil, 0
	table := appendTable(nil, entries)
	tail := appendFooter(table, p.repo.hs.sum(table), len(table), len(entries), 0)
	segs = append(segs, tail)
	size += len(tail)
	name := p.repo.hs.sum(segs...).String()
	p.mu.Lock()
	idx := len(p.names)
	p.names = append(p.names, name)
	for _, e := range entries {
		p.known[e.hash] = idx
	}
	p.mu.Unlock()
	p.upSem <- struct{}{}
	p.uploads.Add(1)
	go func() {
		defer p.uploads.Done()
		defer func() { <-p.upSem }()
		if err := p.upload(idx, name, segs, int64(size)); err != nil {
			p.fail(err)
		}
	}()
}

// upload stores a pack. A pack that already exists is reused only while it
// is young; an older one may be unreferenced and about to be swept, so the
// pack is rewritten with a salt, which gives it a new name.
func (p *packer) upload(idx int, name string, segs [][]byte, size int64) error {
	ctx := p.ctx
	now := p.repo.now()
	created, err := p.repo.blobs.PutBlob(ctx, packKey(p.repo.tenantID, name), newSegReader(segs), size)
	if err != nil {
		return fmt.Errorf("upload pack %s: %w", name, err)
	}
	put := now
	if !created {
		info, err := p.repo.blobs.StatBlob(ctx, packKey(p.repo.tenantID, name))
		if err != nil {
			return fmt.Errorf("stat pack %s: %w", name, err)
		}
		put = info.ModTime
		if now.Sub(info.ModTime) > MaxCommitAge/2 {
			tail := segs[len(segs)-1]
			binary.LittleEndian.PutUint64(tail[len(tail)-16:], uint64(now.UnixNano()))
			name = p.repo.hs.sum(segs...).String()
			if _, err := p.repo.blobs.PutBlob(ctx, packKey(p.repo.tenantID, name), newSegReader(segs), size); err != nil {
				return fmt.Errorf("upload pack %s: %w", name, err)
			}
			put = now
			p.mu.Lock()
			p.names[idx] = name
			p.mu.Unlock()
		}
	}
	p.mu.Lock()
	if p.firstPut.IsZero() || put.Before(p.firstPut) {
		p.firstPut = put
	}
	if created {
		p.st.PacksWritten++
		p.st.PackBytes += size
	}
	p.mu.Unlock()
	return nil
}

// finish flushes, waits for every upload and returns the new packs.
func (p *packer) finish(ctx context.Context) ([]string, error) {
	if p.finished {
		return nil, bothy.Errorf(bothy.EINVALID, "finish: writer already finished")
	}
	p.finished = true
	if !p.started {
		return nil, p.failed()
	}
	err := p.flush(ctx)
	close(p.order)
	close(p.work)
	done := make(chan struct{})
	go func() {
		<-p.assembled
		p.uploads.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		p.cancel()
		<-done
		return nil, fmt.Errorf("finish: %w", ctx.Err())
	}
	p.cancel()
	if err == nil {
		err = p.failed()
	}
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.firstPut.IsZero() {
		if age := p.repo.now().Sub(p.firstPut); age > MaxCommitAge {
			return nil, bothy.Errorf(bothy.ECONFLICT, "finish: packs were uploaded %v ago, over MaxCommitAge %v; checkpoint again", age.Round(time.Second), MaxCommitAge)
		}
	}
	names := append([]string(nil), p.names...)
	sort.Strings(names)
	return names, nil
}

// packOf returns the new pack holding h, once finish has returned.
func (p *packer) packOf(h Hash) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.known[h]
	if !ok || i < 0 {
		return "", false
	}
	return p.names[i], true
}

// segReader reads a sequence of byte slices as one stream.
type segReader struct{ segs [][]byte }

// newSegReader reads segs without changing the slice it is given.
func newSegReader(segs [][]byte) *segReader { return &segReader{segs: append([][]byte(nil), segs...)} }

func (r *segReader) Read(b []byte) (int, error) {
	for len(r.segs) > 0 && len(r.segs[0]) == 0 {
		r.segs = r.segs[1:]
	}
	if len(r.segs) == 0 {
		return 0, io.EOF
	}
	n := copy(b, r.segs[0])
	r.segs[0] = r.segs[0][n:]
	return n, nil
}

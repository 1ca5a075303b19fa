package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
	"golang.org/x/sys/unix"
)

// CheckpointOptions configures Repo.Checkpoint.
type CheckpointOptions struct {
	// StatCache is the path of a local stat cache file for this workspace
	// directory ("" = none). It is read when it describes the parent's root
	// and rewritten after a successful checkpoint.
	StatCache string
	// Workers is the number of file readers (0 = 2*GOMAXPROCS).
	Workers int
}

// Result is the outcome of a checkpoint: what to commit.
type Result struct {
	Root      Hash
	Packs     []string // exactly the packs holding an object reachable from Root, sorted
	Size      int64    // total bytes of regular files
	FileCount int64    // regular files
	Stats     Stats
}

// CommitRequest asks to commit the result as the next revision of c, by
// compare-and-swap on c's generation and current revision.
func (res *Result) CommitRequest(c *bothy.Computer, createdBy string) *bothy.CommitRequest {
	return &bothy.CommitRequest{
		TenantID: c.TenantID, ComputerID: c.ID, Generation: c.Generation, Base: c.Revision,
		RootDigest: res.Root.String(), Packs: res.Packs, Size: res.Size, FileCount: res.FileCount,
		CreatedBy: createdBy,
	}
}

// scanNode is one directory during a checkpoint.
type scanNode struct {
	path    string // the directory on the host
	rel     string // slash path relative to the checkpoint root, "" for the root
	entries []Entry
	stats   []statKey   // per entry, for the stat cache (files only)
	subdirs []*scanNode // in entry order
	dirIdx  []int       // index in entries of each subdir
}

// fileJob is one file to read; the reader sends its chunks in order.
type fileJob struct {
	path   string
	entry  *Entry
	chunks chan chunkData
	err    error // set before chunks is closed
}

// chunkData is a data chunk, or a hole of hole bytes (data nil).
type chunkData struct {
	hash Hash
	data []byte
	hole int64
}

// Checkpoint stores the directory dir on top of parent (nil = the empty
// workspace) and returns the new root and the exact pack list to commit.
// Files whose stat matches the stat cache are not read again.
func (r *Repo) Checkpoint(ctx context.Context, dir string, parent *Snapshot, opts CheckpointOptions) (*Result, error) {
	start := time.Now()
	parent, err := r.checkpointParent(ctx, dir, parent)
	if err != nil {
		return nil, err
	}
	var cache *statCache
	if opts.StatCache != "" {
		cache = loadStatCache(opts.StatCache, r.cacheID(), parent.Root())
	}
	w := parent.NewWriter()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	root, st, err := r.scan(ctx, cancel, dir, w, cache, opts.Workers, start)
	if err != nil {
		w.p.finish(context.Background())
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	rootHash, trees, err := r.writeTrees(ctx, w, root)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	res := &Result{Root: rootHash}
	entries, err := res.collect(root, trees, w, parent, opts.StatCache != "")
	if err != nil {
		return nil, err
	}
	ws := w.Stats()
	st.NewBlobs, st.NewBlobBytes, st.NewTrees = ws.NewBlobs, ws.NewBlobBytes, ws.NewTrees
	st.PacksWritten, st.PackBytes = ws.PacksWritten, ws.PackBytes
	res.Stats = st
	// An unchanged tree over a cache that already describes it needs no rewrite.
	unchanged := cache != nil && st.FilesRead == 0 && res.Root == parent.Root() && len(entries) == len(cache.m)
	if opts.StatCache != "" && !unchanged {
		if err := writeStatCache(opts.StatCache, r.cacheID(), res.Root, entries); errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			// The cache only spares reading files again: a full disk
			// must not fail the checkpoint (and with it reads of a
			// running computer). The old cache no longer describes the
			// tree, so it goes, and the next checkpoint reads every file.
			os.Remove(opts.StatCache)
		} else if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
		}
	}
	return res, nil
}

// checkpointParent returns the snapshot a checkpoint of dir starts from
// (parent, or the empty workspace for nil), after checking that it is of
// r and that dir is a directory.
func (r *Repo) checkpointParent(ctx context.Context, dir string, parent *Snapshot) (*Snapshot, error) {
	if parent == nil {
		var err error
		if parent, err = r.Open(ctx, "", nil); err != nil {
			return nil, err
		}
	}
	if parent.repo != r {
		return nil, bothy.Errorf(bothy.EINVALID, "checkpoint: parent snapshot belongs to another repo")
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	} else if !fi.IsDir() {
		return nil, bothy.Errorf(bothy.ENOTDIR, "checkpoint: %s is not a directory", dir)
	}
	return parent, nil
}

// scan walks dir and writes the content of every file the stat cache does
// not vouch for into w: workers read and chunk files, and one sequencer
// adds their chunks in walk order, which keeps packs deterministic (it
// cancels ctx at its first error). It returns the walked tree, whose file
// entries then hold their chunks, and the scan's part of the stats.
func (r *Repo) scan(ctx context.Context, cancel context.CancelFunc, dir string, w *Writer, cache *statCache, workers int, start time.Time) (*scanNode, Stats, error) {
	if workers <= 0 {
		workers = 2 * runtime.GOMAXPROCS(0)
	}
	jobs := make(chan *fileJob, 4*workers)
	order := make(chan *fileJob, 64*workers)
	for i := 0; i < workers; i++ {
		go r.readFiles(ctx, jobs)
	}
	var st Stats
	seqDone := make(chan error, 1)
	go func() { seqDone <- sequence(ctx, cancel, w, order, &st) }()
	// Walk with a few goroutines (stat is most of an incremental checkpoint,
	// and two walkers took it from ~190 to ~120 ms on 50,000 files here),
	// then queue the files in walk order, so packs stay deterministic.
	sc := &scanner{ctx: ctx, cache: cache, jobs: jobs, order: order, racy: start.Add(-racyWindow).UnixNano(),
		par: make(chan struct{}, 3)}
	root, werr := sc.walk(dir, "", 0o755)
	if werr == nil {
		werr = sc.queue(root)
	}
	close(jobs)
	close(order)
	serr := <-seqDone
	if werr == nil {
		werr = serr
	}
	if werr != nil {
		return nil, st, werr
	}
	st.Files, st.Dirs, st.Symlinks, st.Skipped = sc.files.Load(), sc.dirs.Load(), sc.symlinks.Load(), sc.skipped.Load()
	return root, st, nil
}

// readFiles is one file reader of scan: it reads and chunks the files of
// jobs until jobs is closed.
func (r *Repo) readFiles(ctx context.Context, jobs <-chan *fileJob) {
	// The 8 MiB chunking buffer comes from a pool, and only once a
	// worker has a file to read: an incremental checkpoint reads a
	// handful of files, and zeroing a fresh buffer per worker cost
	// more than its whole scan of unchanged files.
	var bp *[]byte
	for j := range jobs {
		if bp == nil {
			bp = chunkBufPool.Get().(*[]byte)
		}
		r.readFile(ctx, j, *bp)
	}
	if bp != nil {
		chunkBufPool.Put(bp)
	}
}

// sequence is scan's sequencer: it adds the chunks of the files of order,
// in order, to w, sets each file's entry, and counts what was read into
// st. At its first error it cancels the scan and drains order.
func sequence(ctx context.Context, cancel context.CancelFunc, w *Writer, order <-chan *fileJob, st *Stats) error {
	var serr error
	for j := range order {
		var chunks []Chunk
		var size int64
		for c := range j.chunks {
			if c.data == nil {
				chunks = append(chunks, Chunk{Size: c.hole})
				size += c.hole
				continue
			}
			if serr == nil {
				serr = w.add(ctx, c.hash, kindData, c.data, false)
			}
			chunks = append(chunks, Chunk{c.hash, int64(len(c.data))})
			size += int64(len(c.data))
		}
		if serr == nil && j.err != nil {
			serr = j.err
		}
		j.entry.Chunks, j.entry.Size = chunks, size
		st.FilesRead++
		st.BytesRead += size
		if serr != nil {
			cancel()
		}
	}
	return serr
}

// writeTrees encodes the trees of the scanned directories, bottom-up in
// walk order, adds them to w and finishes its packs. It returns the root
// and every tree that is not the empty one.
func (r *Repo) writeTrees(ctx context.Context, w *Writer, root *scanNode) (Hash, []Hash, error) {
	var trees []Hash
	var build func(n *scanNode) (Hash, error)
	build = func(n *scanNode) (Hash, error) {
		for i, c := range n.subdirs {
			h, err := build(c)
			if err != nil {
				return h, err
			}
			n.entries[n.dirIdx[i]].Tree = h
		}
		t := &Tree{Entries: n.entries}
		b := t.Encode()
		h := r.Hash(b)
		if h != r.empty {
			trees = append(trees, h)
		}
		return h, w.add(ctx, h, kindTree, b, false)
	}
	rootHash, err := build(root)
	if err != nil {
		w.p.finish(context.Background())
		return Hash{}, nil, err
	}
	if _, err := w.Finish(ctx); err != nil {
		return Hash{}, nil, err
	}
	return rootHash, trees, nil
}

// collect totals the files of the scanned tree into res and sets
// res.Packs to the exact pack set: the pack of every reachable object,
// written by w or already in parent. With wantCache it returns the stat
// cache entries of the files whose stat can vouch for them.
func (res *Result) collect(root *scanNode, trees []Hash, w *Writer, parent *Snapshot, wantCache bool) ([]cacheEntry, error) {
	packs := map[string]bool{}
	locate := func(h Hash) error {
		if name, ok := w.p.packOf(h); ok {
			packs[name] = true
		} else if loc, ok := parent.index[h]; ok {
			packs[loc.table.name] = true
		} else {
			return bothy.Errorf(bothy.EINTERNAL, "checkpoint: object %s has no pack", h)
		}
		return nil
	}
	var entries []cacheEntry
	var walkErr error
	var collect func(n *scanNode)
	collect = func(n *scanNode) {
		for i := range n.entries {
			e := &n.entries[i]
			if e.Type != TypeFile {
				continue
			}
			res.FileCount++
			res.Size += e.Size
			for _, c := range e.Chunks {
				if c.Hole() {
					continue
				}
				if err := locate(c.Hash); err != nil && walkErr == nil {
					walkErr = err
				}
			}
			if sk := n.stats[i]; wantCache && sk.size >= 0 && sk.size == e.Size {
				entries = append(entries, cacheEntry{path: joinRel(n.rel, e.Name), key: sk, chunks: e.Chunks})
			}
		}
		for _, c := range n.subdirs {
			collect(c)
		}
	}
	collect(root)
	for _, h := range trees {
		if err := locate(h); err != nil && walkErr == nil {
			walkErr = err
		}
	}
	if walkErr != nil {
		return nil, walkErr
	}
	for p := range packs {
		res.Packs = append(res.Packs, p)
	}
	res.Packs = sortedUnique(res.Packs)
	return entries, nil
}

// chunkBufPool holds the buffers that file readers chunk into.
var chunkBufPool = sync.Pool{New: func() any {
	b := make([]byte, 2*MaxChunkSize)
	return &b
}}

// racyWindow covers the coarse granularity of file timestamps: a file whose
// mtime or ctime is this close to the scan start may change again without a
// visible stat change, so it is not put in the stat cache.
const racyWindow = 50 * time.Millisecond

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

type scanner struct {
	ctx                            context.Context
	cache                          *statCache
	jobs, order                    chan *fileJob
	racy                           int64
	par                            chan struct{} // slots for walking subdirectories concurrently
	files, dirs, symlinks, skipped atomic.Int64
}

// walk reads directory path (rel from the root) and queues its files.
func (sc *scanner) walk(path, rel string, mode fs.FileMode) (*scanNode, error) {
	if err := sc.ctx.Err(); err != nil {
		return nil, err
	}
	// Stat names relative to the open directory: a path lookup per file
	// through every parent was a third of an incremental checkpoint.
	dfd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(dfd), path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	sortStrings(names)
	n := &scanNode{path: path, rel: rel, entries: make([]Entry, 0, len(names)), stats: make([]statKey, 0, len(names))}
	var subs []subdir
	for _, name := range names {
		sub, err := sc.add(n, dfd, name)
		if err != nil {
			return nil, err
		} else if sub != nil {
			subs = append(subs, *sub)
		}
	}
	if err := sc.walkSubdirs(n, subs); err != nil {
		return nil, err
	}
	return n, nil
}

// subdir is a directory that walk found, to walk next.
type subdir struct {
	path, rel string
	mode      fs.FileMode
}

// add stats the entry name of n's directory, open as dfd, and appends it
// to n; a directory is returned to walk. An entry removed meanwhile, an
// unstorable symlink and special files are left out.
func (sc *scanner) add(n *scanNode, dfd int, name string) (*subdir, error) {
	p := n.path + "/" + name
	var ust unix.Stat_t
	if err := unix.Fstatat(dfd, name, &ust, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil, nil // removed while we scan
		}
		return nil, &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	st := syscall.Stat_t{Mode: ust.Mode, Size: ust.Size, Ino: ust.Ino,
		Mtim: syscall.Timespec{Sec: ust.Mtim.Sec, Nsec: ust.Mtim.Nsec},
		Ctim: syscall.Timespec{Sec: ust.Ctim.Sec, Nsec: ust.Ctim.Nsec}}
	key := statKeyOf(&st)
	perm := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		sc.files.Add(1)
		n.entries = append(n.entries, Entry{Name: name, Type: TypeFile, Mode: perm, ModTime: key.mtime})
		if key.mtime >= sc.racy || key.ctime >= sc.racy {
			key.size = -1 // racy: read now, never trusted later
		}
		n.stats = append(n.stats, key)
	case syscall.S_IFDIR:
		sc.dirs.Add(1)
		n.entries = append(n.entries, Entry{Name: name, Type: TypeDir, Mode: perm})
		n.stats = append(n.stats, statKey{size: -1})
		n.dirIdx = append(n.dirIdx, len(n.entries)-1)
		return &subdir{p, joinRel(n.rel, name), perm}, nil
	case syscall.S_IFLNK:
		target, err := os.Readlink(p)
		if err != nil {
			return nil, err
		}
		if target == "" || len(target) > MaxTargetLen {
			sc.skipped.Add(1)
			return nil, nil
		}
		sc.symlinks.Add(1)
		n.entries = append(n.entries, Entry{Name: name, Type: TypeSymlink, Mode: perm,
			ModTime: key.mtime, Size: int64(len(target)), Target: target})
		n.stats = append(n.stats, statKey{size: -1})
	default:
		sc.skipped.Add(1)
	}
	return nil, nil
}

// walkSubdirs walks the subdirectories of n into n.subdirs, in goroutines
// while walking slots are free, else in this one; it returns the first
// error.
func (sc *scanner) walkSubdirs(n *scanNode, subs []subdir) error {
	n.subdirs = make([]*scanNode, len(subs))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i, s := range subs {
		walkSub := func() {
			c, err := sc.walk(s.path, s.rel, s.mode)
			mu.Lock()
			n.subdirs[i] = c
			if err != nil && firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}
		select {
		case sc.par <- struct{}{}:
			wg.Add(1)
			go func() {
				defer wg.Done()
				walkSub()
				<-sc.par
			}()
		default:
			walkSub()
		}
	}
	wg.Wait()
	return firstErr
}

// queue sends the files of n and its subdirectories, in walk order, to be
// read, except those the stat cache vouches for; the sequencer fills their
// entries.
func (sc *scanner) queue(n *scanNode) error {
	for i := range n.entries {
		e := &n.entries[i]
		if e.Type != TypeFile {
			continue
		}
		key := n.stats[i]
		if c, ok := sc.cache.lookup(joinRel(n.rel, e.Name), key); ok {
			e.Chunks, e.Size = c, key.size
			continue
		}
		j := &fileJob{path: n.path + "/" + e.Name, entry: e, chunks: make(chan chunkData, 4)}
		select {
		case sc.order <- j:
		case <-sc.ctx.Done():
			return sc.ctx.Err()
		}
		select {
		case sc.jobs <- j:
		case <-sc.ctx.Done():
			close(j.chunks)
			return sc.ctx.Err()
		}
	}
	for _, c := range n.subdirs {
		if err := sc.queue(c); err != nil {
			return err
		}
	}
	return nil
}

// readFile reads, chunks and hashes one file, sending chunks in order. It
// uses raw system calls: os.Open would also try to register regular files
// with the network poller, two wasted system calls per file.
func (r *Repo) readFile(ctx context.Context, j *fileJob, buf []byte) {
	defer close(j.chunks)
	fd, err := syscall.Open(j.path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		j.err = &os.PathError{Op: "open", Path: j.path, Err: err}
		return
	}
	defer syscall.Close(fd)
	err = fileChunks(fd, buf, func(b []byte, hole int64) error {
		c := chunkData{hole: hole}
		if b != nil {
			c.data = append([]byte(nil), b...)
			c.hash = r.Hash(c.data)
		}
		select {
		case j.chunks <- c:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if errors.Is(err, ctx.Err()) && ctx.Err() != nil {
		j.err = ctx.Err()
	} else if err != nil {
		j.err = fmt.Errorf("read %s: %w", j.path, err)
	}
}

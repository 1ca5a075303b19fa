package checkpoint

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/zeebo/blake3"
)

// The stat cache is a local file per workspace directory that maps each
// regular file's path and stat (size, mtime, ctime, inode, mode) to its
// chunks, so a checkpoint reads only files whose stat changed. It names the
// root digest it describes and is used only when that is the parent's root.
//
// Layout: magic (8), repo id (32), root (32), entry count (uvarint), entries,
// BLAKE3 of everything before (32). An entry is the length of the prefix
// shared with the previous path, the rest of the path, size, mtime, ctime,
// inode, mode, chunk count, then hash (32) and size per chunk; integers are
// varints.
const statCacheMagic = "BTHYSC\x00\x01"

type statKey struct {
	size, mtime, ctime int64
	ino                uint64
	mode               uint32
}

func statKeyOf(st *syscall.Stat_t) statKey {
	return statKey{
		size:  st.Size,
		mtime: st.Mtim.Sec*1e9 + st.Mtim.Nsec,
		ctime: st.Ctim.Sec*1e9 + st.Ctim.Nsec,
		ino:   st.Ino,
		mode:  st.Mode,
	}
}

type cacheEntry struct {
	path   string
	key    statKey
	chunks []Chunk
}

type statCache struct {
	m map[string]*cacheEntry
}

// lookup returns the chunks of path when its stat is unchanged.
func (c *statCache) lookup(path string, key statKey) ([]Chunk, bool) {
	if c == nil || key.size < 0 {
		return nil, false
	}
	e, ok := c.m[path]
	if !ok || e.key != key {
		return nil, false
	}
	return e.chunks, true
}

// cacheID identifies the repo (tenant and key) a stat cache belongs to.
func (r *Repo) cacheID() Hash { return r.hs.sum([]byte("bothy stat cache\x00"), []byte(r.tenantID)) }

// loadStatCache returns the cache at path if it describes root, else nil: a
// missing, stale or damaged cache only costs a full read.
func loadStatCache(path string, id, root Hash) *statCache {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 8+32+32+1+32 || string(b[:8]) != statCacheMagic {
		return nil
	}
	if !bytes.Equal(b[8:40], id[:]) || !bytes.Equal(b[40:72], root[:]) {
		return nil
	}
	body, sum := b[:len(b)-32], b[len(b)-32:]
	if s := blake3.Sum256(body); !bytes.Equal(s[:], sum) {
		return nil
	}
	c, err := decodeStatCache(body[72:])
	if err != nil {
		return nil
	}
	return c
}

func decodeStatCache(b []byte) (*statCache, error) {
	var err error
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			err = fmt.Errorf("bad varint")
			return 0
		}
		b = b[n:]
		return v
	}
	sv := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			err = fmt.Errorf("bad varint")
			return 0
		}
		b = b[n:]
		return v
	}
	count := uv()
	if err != nil || count > uint64(len(b)) {
		return nil, fmt.Errorf("bad count")
	}
	c := &statCache{m: make(map[string]*cacheEntry, count)}
	ents := make([]cacheEntry, count)
	var prev string
	for i := range ents {
		e := &ents[i]
		shared, rest := uv(), uv()
		if err != nil || shared > uint64(len(prev)) || rest > uint64(len(b)) {
			return nil, fmt.Errorf("bad path")
		}
		e.path = prev[:shared] + string(b[:rest])
		b = b[rest:]
		prev = e.path
		e.key.size = sv()
		e.key.mtime = sv()
		e.key.ctime = sv()
		e.key.ino = uv()
		e.key.mode = uint32(uv())
		nc := uv()
		if err != nil || nc > uint64(len(b))/33 {
			return nil, fmt.Errorf("bad chunk count")
		}
		if nc > 0 {
			e.chunks = make([]Chunk, nc)
		}
		for j := range e.chunks {
			copy(e.chunks[j].Hash[:], b)
			b = b[32:]
			e.chunks[j].Size = int64(uv())
		}
		if err != nil {
			return nil, err
		}
		c.m[e.path] = e
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("trailing bytes")
	}
	return c, nil
}

// writeStatCache replaces the cache at path atomically.
func writeStatCache(path string, id, root Hash, entries []cacheEntry) error {
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	b := make([]byte, 0, 72+len(entries)*80)
	b = append(b, statCacheMagic...)
	b = append(b, id[:]...)
	b = append(b, root[:]...)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	var prev string
	for i := range entries {
		e := &entries[i]
		shared := 0
		for shared < len(prev) && shared < len(e.path) && prev[shared] == e.path[shared] {
			shared++
		}
		b = binary.AppendUvarint(b, uint64(shared))
		b = binary.AppendUvarint(b, uint64(len(e.path)-shared))
		b = append(b, e.path[shared:]...)
		prev = e.path
		b = binary.AppendVarint(b, e.key.size)
		b = binary.AppendVarint(b, e.key.mtime)
		b = binary.AppendVarint(b, e.key.ctime)
		b = binary.AppendUvarint(b, e.key.ino)
		b = binary.AppendUvarint(b, uint64(e.key.mode))
		b = binary.AppendUvarint(b, uint64(len(e.chunks)))
		for _, c := range e.chunks {
			b = append(b, c.Hash[:]...)
			b = binary.AppendUvarint(b, uint64(c.Size))
		}
	}
	sum := blake3.Sum256(b)
	b = append(b, sum[:]...)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write stat cache: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write stat cache: %w", err)
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write stat cache: %w", err)
	}
	return nil
}

func sortStrings(s []string) { sort.Strings(s) }

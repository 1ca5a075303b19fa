package checkpoint

import (
	"bytes"
	"io"

	"golang.org/x/sys/unix"
)

// Content-defined chunking (FastCDC with normalized chunking over a gear
// hash). Files up to SmallFileSize are one chunk; larger files are cut where
// the rolling hash matches a mask, so an edit moves only nearby boundaries.
const (
	SmallFileSize = 1 << 20 // files up to this size are one chunk
	MinChunkSize  = 256 << 10
	AvgChunkSize  = 1 << 20
	MaxChunkSize  = 4 << 20
)

// Masks for normalized chunking: harder to match before the average size,
// easier after, which narrows the size distribution around AvgChunkSize.
var (
	maskHard = spreadMask(22)
	maskEasy = spreadMask(18)
)

// spreadMask sets n bits, every other bit down from bit 63, so each tested
// bit mixes many recent input bytes.
func spreadMask(n int) uint64 {
	var m uint64
	for k := 0; k < n; k++ {
		m |= 1 << (63 - 2*k)
	}
	return m
}

// gear is the gear-hash table, derived from a fixed seed with splitmix64 so
// that chunk boundaries never change between builds.
var gear = func() (g [256]uint64) {
	x := uint64(0x626f746879636463) // "bothycdc"
	for i := range g {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		g[i] = z ^ (z >> 31)
	}
	return g
}()

// cutPoint returns the length of the first chunk of b. When eof is false, b
// must hold at least MaxChunkSize bytes.
func cutPoint(b []byte) int {
	n := len(b)
	if n <= MinChunkSize {
		return n
	}
	if n > MaxChunkSize {
		n = MaxChunkSize
	}
	normal := AvgChunkSize
	if n < normal {
		normal = n
	}
	var h uint64
	i := MinChunkSize
	for ; i < normal; i++ {
		h = (h << 1) + gear[b[i]]
		if h&maskHard == 0 {
			return i + 1
		}
	}
	for ; i < n; i++ {
		h = (h << 1) + gear[b[i]]
		if h&maskEasy == 0 {
			return i + 1
		}
	}
	return n
}

// chunkReader splits a stream into chunks. A stream of at most SmallFileSize
// bytes is one chunk.
type chunkReader struct {
	r     io.Reader
	buf   []byte
	start int
	end   int
	eof   bool
	first bool
}

func newChunkReader(r io.Reader, buf []byte) *chunkReader {
	if cap(buf) < 2*MaxChunkSize {
		buf = make([]byte, 2*MaxChunkSize)
	}
	return &chunkReader{r: r, buf: buf[:cap(buf)], first: true}
}

// fill reads until the buffer holds MaxChunkSize bytes or the stream ends.
func (c *chunkReader) fill() error {
	if c.end-c.start >= MaxChunkSize || c.eof {
		return nil
	}
	if c.start > 0 {
		c.end = copy(c.buf, c.buf[c.start:c.end])
		c.start = 0
	}
	for c.end-c.start < MaxChunkSize && !c.eof {
		n, err := c.r.Read(c.buf[c.end:])
		c.end += n
		if err == io.EOF {
			c.eof = true
		} else if err != nil {
			return err
		}
	}
	return nil
}

// next returns the next chunk, which stays valid until the following call,
// or io.EOF.
func (c *chunkReader) next() ([]byte, error) {
	if err := c.fill(); err != nil {
		return nil, err
	}
	avail := c.buf[c.start:c.end]
	if len(avail) == 0 {
		return nil, io.EOF
	}
	var n int
	if c.first && c.eof && len(avail) <= SmallFileSize {
		n = len(avail)
	} else {
		n = cutPoint(avail)
	}
	c.first = false
	c.start += n
	return avail[:n], nil
}

// Holes. A file's chunk list may hold holes: a Chunk with the zero Hash
// stands for Size zero bytes that are stored nowhere (Chunk.Hole). They
// come from the holes of a sparse file (SEEK_HOLE) and from data chunks
// that are all zeros, so a 1000 MB file made by truncate costs no hashing
// and no pack bytes, and a restore leaves them unwritten. Revisions made
// before holes have none and read as before.

// pieces turns a file's chunks into its chunk list: it merges holes and
// all-zero chunks into one hole and calls yield for each data chunk (hole
// 0) and each hole (data nil), in order.
type pieces struct {
	hole  int64
	yield func(data []byte, hole int64) error
}

func (p *pieces) data(b []byte) error {
	if allZero(b) {
		p.hole += int64(len(b))
		return nil
	}
	if err := p.end(); err != nil {
		return err
	}
	return p.yield(b, 0)
}

// end emits the pending hole.
func (p *pieces) end() error {
	if p.hole == 0 {
		return nil
	}
	n := p.hole
	p.hole = 0
	return p.yield(nil, n)
}

// zeros is a page of zero bytes, for comparing and for reading holes.
var zeros [64 << 10]byte

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// streamChunks chunks the stream r (see pieces).
func streamChunks(r io.Reader, buf []byte, yield func(data []byte, hole int64) error) error {
	p := &pieces{yield: yield}
	cr := newChunkReader(r, buf)
	for {
		b, err := cr.next()
		if err == io.EOF {
			return p.end()
		} else if err != nil {
			return err
		}
		if err := p.data(b); err != nil {
			return err
		}
	}
}

// fileChunks chunks the regular file fd from offset 0 to its size (see
// pieces), reading only the data regions the file system reports
// (SEEK_DATA, SEEK_HOLE): its holes cost no read and no hash. Each data
// region is chunked as a stream of its own. On a file system without
// SEEK_DATA the whole file is one region.
func fileChunks(fd int, buf []byte, yield func(data []byte, hole int64) error) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	size := st.Size
	p := &pieces{yield: yield}
	var pos int64
	for pos < size {
		data, err := unix.Seek(fd, pos, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // holes to the end
		}
		end := size
		if err != nil {
			data = pos
		} else if h, err := unix.Seek(fd, data, unix.SEEK_HOLE); err == nil {
			end = min(h, size)
		}
		if data >= size {
			break
		}
		p.hole += data - pos
		pos = data
		cr := newChunkReader(&preadReader{fd: fd, off: data, end: end}, buf)
		for {
			b, err := cr.next()
			if err == io.EOF {
				break
			} else if err != nil {
				return err
			}
			pos += int64(len(b))
			if err := p.data(b); err != nil {
				return err
			}
		}
		if pos < end {
			break // the file shrank while it was read
		}
	}
	p.hole += max(0, size-pos)
	return p.end()
}

// preadReader reads the bytes [off, end) of a file descriptor.
type preadReader struct {
	fd       int
	off, end int64
}

func (r *preadReader) Read(b []byte) (int, error) {
	if r.off >= r.end {
		return 0, io.EOF
	}
	if rest := r.end - r.off; int64(len(b)) > rest {
		b = b[:rest]
	}
	for {
		n, err := unix.Pread(r.fd, b, r.off)
		if err == unix.EINTR {
			continue
		} else if err != nil {
			return 0, err
		} else if n == 0 {
			return 0, io.EOF
		}
		r.off += int64(n)
		return n, nil
	}
}

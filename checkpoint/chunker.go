package checkpoint

import (
	"io"
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

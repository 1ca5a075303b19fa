package checkpoint

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"

	"github.com/bothyhq/bothy"
	"github.com/klauspost/compress/zstd"
)

// Pack layout: frames from offset 0, then the blob table, then a fixed
// footer. A frame is either one zstd frame or raw bytes, and holds one large
// blob or several small ones. See docs/checkpoint-format.md.
const (
	TargetPackSize = 24 << 20 // a pack is sealed once it reaches this size
	MaxFrameSize   = 256 << 10
	largeBlobSize  = 128 << 10 // blobs from this size get a frame of their own

	footerSize  = 56
	packMagic   = "BTHYPK\x00\x01" // the last byte is the format version
	packPrefix  = "packs/"
	kindData    = 1
	kindTree    = 2
	flagZstd    = 0x80
	tableMaxLen = 64 << 20
)

// packEntry is one row of a pack's blob table.
type packEntry struct {
	hash     Hash
	kind     uint8
	zstd     bool
	frameOff int64
	frameLen int64
	off      int64 // offset of the blob in the decoded frame
	length   int64
}

// packTable is the decoded blob table of one pack.
type packTable struct {
	name    string
	size    int64
	entries []packEntry
}

func packKey(tenantID, name string) string { return packPrefix + tenantID + "/" + name }

// appendTable encodes the blob table of entries.
func appendTable(b []byte, entries []packEntry) []byte {
	for i := range entries {
		e := &entries[i]
		b = append(b, e.hash[:]...)
		flags := e.kind
		if e.zstd {
			flags |= flagZstd
		}
		b = append(b, flags)
		b = binary.AppendUvarint(b, uint64(e.frameOff))
		b = binary.AppendUvarint(b, uint64(e.frameLen))
		b = binary.AppendUvarint(b, uint64(e.off))
		b = binary.AppendUvarint(b, uint64(e.length))
	}
	return b
}

// appendFooter appends the footer: the keyed hash of the table, the table
// length, the entry count, a salt (0 unless a stale pack had to be rewritten
// under a new name) and the magic.
func appendFooter(b []byte, tableHash Hash, tableLen, count int, salt uint64) []byte {
	b = append(b, tableHash[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(tableLen))
	b = binary.LittleEndian.AppendUint32(b, uint32(count))
	b = binary.LittleEndian.AppendUint64(b, salt)
	return append(b, packMagic...)
}

// parseFooter returns the table length and entry count.
func parseFooter(f []byte) (tableHash Hash, tableLen, count int, err error) {
	if len(f) != footerSize || string(f[48:]) != packMagic {
		return tableHash, 0, 0, fmt.Errorf("bad pack footer magic")
	}
	copy(tableHash[:], f[:32])
	tableLen = int(binary.LittleEndian.Uint32(f[32:]))
	count = int(binary.LittleEndian.Uint32(f[36:]))
	if tableLen > tableMaxLen || count > tableLen/36 {
		return tableHash, 0, 0, fmt.Errorf("bad pack footer lengths")
	}
	return tableHash, tableLen, count, nil
}

// parseTable decodes a blob table of a pack of packSize bytes.
func parseTable(b []byte, count int, packSize int64) ([]packEntry, error) {
	entries := make([]packEntry, count)
	dataEnd := packSize - int64(len(b)) - footerSize
	for i := range entries {
		e := &entries[i]
		if len(b) < 33 {
			return nil, fmt.Errorf("truncated blob table")
		}
		copy(e.hash[:], b[:32])
		flags := b[32]
		b = b[33:]
		e.kind = flags &^ flagZstd
		e.zstd = flags&flagZstd != 0
		var vals [4]int64
		for j := range vals {
			v, n := binary.Uvarint(b)
			if n <= 0 || v > 1<<40 {
				return nil, fmt.Errorf("bad varint in blob table")
			}
			vals[j] = int64(v)
			b = b[n:]
		}
		e.frameOff, e.frameLen, e.off, e.length = vals[0], vals[1], vals[2], vals[3]
		if e.kind != kindData && e.kind != kindTree || e.frameLen <= 0 ||
			e.frameOff+e.frameLen > dataEnd || e.length > MaxChunkSize ||
			!e.zstd && e.off+e.length > e.frameLen {
			return nil, fmt.Errorf("bad blob table entry %d", i)
		}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("trailing bytes in blob table")
	}
	return entries, nil
}

// The zstd encoder and decoder are shared: EncodeAll and DecodeAll are safe
// for concurrent use and keep pools of their internal state.
var (
	codecOnce sync.Once
	encoder   *zstd.Encoder
	decoder   *zstd.Decoder
)

func codecs() (*zstd.Encoder, *zstd.Decoder) {
	codecOnce.Do(func() {
		var err error
		encoder, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithEncoderCRC(false),
			zstd.WithZeroFrames(true))
		if err != nil {
			panic(err)
		}
		decoder, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithDecoderMaxMemory(64<<20), zstd.WithDecoderMaxWindow(8<<20))
		if err != nil {
			panic(err)
		}
	})
	return encoder, decoder
}

// decodeFrame returns the decoded bytes of one stored frame.
func decodeFrame(raw []byte, isZstd bool, dst []byte) ([]byte, error) {
	if !isZstd {
		return raw, nil
	}
	_, dec := codecs()
	return dec.DecodeAll(raw, dst[:0])
}

// corruptf returns an ECORRUPT error naming an object and its pack.
func corruptf(h Hash, pack string, format string, args ...any) error {
	return bothy.Errorf(bothy.ECORRUPT, "object %s in pack %s: %s", h, pack, fmt.Sprintf(format, args...))
}

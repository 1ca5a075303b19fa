package checkpoint

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/bothyhq/bothy"
)

// EntryType is the type of a directory entry.
type EntryType uint8

// Entry types.
const (
	TypeFile    EntryType = 1
	TypeDir     EntryType = 2
	TypeSymlink EntryType = 3
)

// String returns "file", "dir" or "symlink".
func (t EntryType) String() string {
	switch t {
	case TypeFile:
		return "file"
	case TypeDir:
		return "dir"
	case TypeSymlink:
		return "symlink"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Chunk is one content-defined piece of a file (small files are one
// chunk), or a hole: Size zero bytes stored nowhere, whose Hash is zero.
type Chunk struct {
	Hash Hash
	Size int64
}

// Hole reports whether c is a hole, Size zero bytes with no blob.
func (c Chunk) Hole() bool { return c.Hash.IsZero() }

// Entry is one name in a directory.
type Entry struct {
	Name    string      // one path element, never "", ".", "..", no '/' or NUL, at most 255 bytes
	Type    EntryType   // TypeFile, TypeDir or TypeSymlink
	Mode    fs.FileMode // permission bits only (0o777 mask); dirs usually 0o755
	Size    int64       // file: content length; symlink: len(Target); dir: 0
	ModTime int64       // unix nanoseconds for files and symlinks; 0 for directories
	Chunks  []Chunk     // files only; empty for an empty file
	Tree    Hash        // directories only: the child tree's digest
	Target  string      // symlinks only
}

// Tree is a directory object: entries sorted by Name (byte order), names unique.
type Tree struct{ Entries []Entry }

// Limits of the tree format.
const (
	MaxNameLen   = 255
	MaxTargetLen = 4095
	treeVersion  = 1
)

// Find returns the entry called name.
func (t *Tree) Find(name string) (*Entry, bool) {
	i := sort.Search(len(t.Entries), func(i int) bool { return t.Entries[i].Name >= name })
	if i < len(t.Entries) && t.Entries[i].Name == name {
		return &t.Entries[i], true
	}
	return nil, false
}

// Encode returns the canonical encoding of t: a version byte, the entry
// count, then per entry its name, type, mode and type-specific fields, with
// unsigned varints for lengths and sizes and zigzag varints for times.
func (t *Tree) Encode() []byte {
	n := 8
	for i := range t.Entries {
		e := &t.Entries[i]
		n += 32 + len(e.Name) + len(e.Target) + len(e.Chunks)*42
	}
	b := make([]byte, 0, n)
	b = append(b, treeVersion)
	b = binary.AppendUvarint(b, uint64(len(t.Entries)))
	for i := range t.Entries {
		e := &t.Entries[i]
		b = binary.AppendUvarint(b, uint64(len(e.Name)))
		b = append(b, e.Name...)
		b = append(b, byte(e.Type))
		b = binary.AppendUvarint(b, uint64(e.Mode&fs.ModePerm))
		switch e.Type {
		case TypeFile:
			b = binary.AppendUvarint(b, uint64(e.Size))
			b = binary.AppendVarint(b, e.ModTime)
			b = binary.AppendUvarint(b, uint64(len(e.Chunks)))
			for _, c := range e.Chunks {
				b = append(b, c.Hash[:]...)
				b = binary.AppendUvarint(b, uint64(c.Size))
			}
		case TypeDir:
			b = append(b, e.Tree[:]...)
		case TypeSymlink:
			b = binary.AppendVarint(b, e.ModTime)
			b = binary.AppendUvarint(b, uint64(len(e.Target)))
			b = append(b, e.Target...)
		}
	}
	return b
}

// DecodeTree decodes a tree encoded by Encode. It is strict: input that is
// not exactly the canonical encoding of a valid tree is ECORRUPT.
func DecodeTree(b []byte) (*Tree, error) {
	t, err := decodeTree(b)
	if err != nil {
		return nil, bothy.Errorf(bothy.ECORRUPT, "decode tree: %v", err)
	}
	if err := t.validate(); err != nil {
		return nil, bothy.Errorf(bothy.ECORRUPT, "decode tree: %v", err)
	}
	// Varints accept redundant encodings; re-encoding rejects them.
	if !bytes.Equal(t.Encode(), b) {
		return nil, bothy.Errorf(bothy.ECORRUPT, "decode tree: non-canonical encoding")
	}
	return t, nil
}

type treeDecoder struct {
	b   []byte
	err error
}

func (d *treeDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *treeDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *treeDecoder) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("truncated")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func decodeTree(b []byte) (*Tree, error) {
	if len(b) == 0 || b[0] != treeVersion {
		return nil, fmt.Errorf("unknown version")
	}
	d := &treeDecoder{b: b[1:]}
	count := d.uvarint()
	// Every entry takes at least 4 bytes, which bounds the allocation.
	if count > uint64(len(d.b))/4 {
		return nil, fmt.Errorf("entry count %d too large", count)
	}
	t := &Tree{Entries: make([]Entry, count)}
	for i := range t.Entries {
		e := &t.Entries[i]
		nl := d.uvarint()
		if nl > MaxNameLen {
			return nil, fmt.Errorf("name too long")
		}
		e.Name = string(d.bytes(nl))
		typ := d.bytes(1)
		if d.err != nil {
			return nil, d.err
		}
		e.Type = EntryType(typ[0])
		mode := d.uvarint()
		if mode > 0o777 {
			return nil, fmt.Errorf("entry %q: bad mode %o", e.Name, mode)
		}
		e.Mode = fs.FileMode(mode)
		switch e.Type {
		case TypeFile:
			size := d.uvarint()
			if size > 1<<62 {
				return nil, fmt.Errorf("entry %q: bad size", e.Name)
			}
			e.Size = int64(size)
			e.ModTime = d.varint()
			nc := d.uvarint()
			if nc > uint64(len(d.b))/33 {
				return nil, fmt.Errorf("entry %q: chunk count too large", e.Name)
			}
			if nc > 0 {
				e.Chunks = make([]Chunk, nc)
			}
			for j := range e.Chunks {
				copy(e.Chunks[j].Hash[:], d.bytes(32))
				cs := d.uvarint()
				if cs > 1<<62 {
					return nil, fmt.Errorf("entry %q: bad chunk size", e.Name)
				}
				e.Chunks[j].Size = int64(cs)
			}
		case TypeDir:
			copy(e.Tree[:], d.bytes(32))
		case TypeSymlink:
			e.ModTime = d.varint()
			tl := d.uvarint()
			if tl > MaxTargetLen {
				return nil, fmt.Errorf("entry %q: target too long", e.Name)
			}
			e.Target = string(d.bytes(tl))
			e.Size = int64(len(e.Target))
		default:
			return nil, fmt.Errorf("entry %q: bad type %d", e.Name, e.Type)
		}
		if d.err != nil {
			return nil, d.err
		}
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(d.b))
	}
	return t, nil
}

// ValidName reports whether name is a valid entry name.
func ValidName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= MaxNameLen &&
		!strings.ContainsAny(name, "/\x00")
}

// validate checks the invariants that Encode and DecodeTree rely on.
func (t *Tree) validate() error {
	for i := range t.Entries {
		e := &t.Entries[i]
		if !ValidName(e.Name) {
			return fmt.Errorf("invalid entry name %q", e.Name)
		}
		if i > 0 && t.Entries[i-1].Name >= e.Name {
			return fmt.Errorf("entries not sorted or not unique at %q", e.Name)
		}
		if e.Mode&^fs.ModePerm != 0 {
			return fmt.Errorf("entry %q: mode %v has more than permission bits", e.Name, e.Mode)
		}
		switch e.Type {
		case TypeFile:
			var sum int64
			for j, c := range e.Chunks {
				if c.Size <= 0 || c.Size > MaxChunkSize && !c.Hole() || c.Size > 1<<62 {
					return fmt.Errorf("entry %q: chunk size %d out of range", e.Name, c.Size)
				}
				if c.Hole() && j > 0 && e.Chunks[j-1].Hole() {
					return fmt.Errorf("entry %q: adjacent holes", e.Name)
				}
				sum += c.Size
				if sum > 1<<62 {
					return fmt.Errorf("entry %q: size out of range", e.Name)
				}
			}
			if sum != e.Size {
				return fmt.Errorf("entry %q: size %d is not the sum of its chunks %d", e.Name, e.Size, sum)
			}
			if !e.Tree.IsZero() || e.Target != "" {
				return fmt.Errorf("entry %q: file with directory or symlink fields", e.Name)
			}
		case TypeDir:
			if e.Size != 0 || e.ModTime != 0 || len(e.Chunks) != 0 || e.Target != "" {
				return fmt.Errorf("entry %q: directory with file or symlink fields", e.Name)
			}
		case TypeSymlink:
			if e.Target == "" || len(e.Target) > MaxTargetLen || strings.IndexByte(e.Target, 0) >= 0 {
				return fmt.Errorf("entry %q: invalid symlink target", e.Name)
			}
			if e.Size != int64(len(e.Target)) || len(e.Chunks) != 0 || !e.Tree.IsZero() {
				return fmt.Errorf("entry %q: symlink with file or directory fields", e.Name)
			}
		default:
			return fmt.Errorf("entry %q: unknown type %d", e.Name, e.Type)
		}
	}
	return nil
}

package supervisor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
)

// Record kinds, as stored in a journal. The accept record is always first
// and has seq 0; every other record is an event of the command.
const (
	kindAccept    byte = 0
	kindStdout    byte = 1
	kindStderr    byte = 2
	kindExit      byte = 3
	kindState     byte = 4
	kindTruncated byte = 5
)

var kindNames = map[byte]string{
	kindStdout: bothy.EventStdout, kindStderr: bothy.EventStderr, kindExit: bothy.EventExit,
	kindState: bothy.EventState, kindTruncated: bothy.EventTruncated,
}

const (
	frameSize = 8  // payload length u32, CRC-32C of the payload u32
	headSize  = 17 // seq u64, unix nanoseconds i64, kind u8: the start of every payload
	// maxChunk is the most output bytes one record holds; bigger writes are split.
	maxChunk = 64 << 10
	// maxPayload bounds a payload on reading, so a corrupt length cannot make
	// the reader allocate without bound. The accept record is the biggest.
	maxPayload = headSize + 4<<20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Room reserved for the end of a command. Every journal keeps at least
// endReserve bytes allocated past its end (fallocate, FALLOC_FL_KEEP_SIZE)
// before it appends output, so that when its disk fills, the exit or
// final state record still fits: a command is never left without an end
// for lack of space. The room is taken reserveStep at a time and given
// back when the command ends.
const (
	endReserve  = 64 << 10
	reserveStep = 256 << 10
	// maxReserve bounds the reserve past the end of the output records.
	maxReserve = frameSize + headSize + maxChunk + endReserve + reserveStep
)

// errDiskFull is returned, once, by journal.output when the command's
// output no longer fits on the disk (ENOSPC, EDQUOT): the journal keeps
// what it holds and takes no more output, and the command must be killed.
var errDiskFull = errors.New("no room on the supervisor's disk for the command's output")

// noSpace reports whether err says the disk or the quota is full.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// record is one framed journal record.
type record struct {
	Seq  int64
	Time time.Time
	Kind byte
	Data []byte
}

func (r *record) encode() []byte {
	b := make([]byte, frameSize+headSize+len(r.Data))
	p := b[frameSize:]
	binary.LittleEndian.PutUint64(p[0:], uint64(r.Seq))
	binary.LittleEndian.PutUint64(p[8:], uint64(r.Time.UnixNano()))
	p[16] = r.Kind
	copy(p[headSize:], r.Data)
	binary.LittleEndian.PutUint32(b[0:], uint32(len(p)))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(p, crcTable))
	return b
}

// event returns r as a domain event of command id.
func (r *record) event(id string) *bothy.Event {
	e := &bothy.Event{CommandID: id, Seq: r.Seq, Kind: kindNames[r.Kind], CreatedAt: r.Time}
	switch r.Kind {
	case kindStdout, kindStderr:
		e.Data = r.Data
	default:
		e.Fields = string(r.Data)
	}
	return e
}

var errTorn = errors.New("torn or corrupt record")

// readRecord reads the record at off from r, which holds size good bytes.
// Of a record whose seq is at most after (and not 0) it reads only the
// head, to skip over it cheaply, and returns it without data. It returns the record and its length.
func readRecord(r io.ReaderAt, off, size, after int64) (*record, int64, error) {
	var hdr [frameSize + headSize]byte
	if size-off < int64(len(hdr)) {
		return nil, 0, errTorn
	}
	if _, err := r.ReadAt(hdr[:], off); err != nil {
		return nil, 0, err
	}
	n := int64(binary.LittleEndian.Uint32(hdr[0:]))
	if n < headSize || n > maxPayload || off+frameSize+n > size {
		return nil, 0, errTorn
	}
	rec := &record{
		Seq:  int64(binary.LittleEndian.Uint64(hdr[frameSize:])),
		Time: time.Unix(0, int64(binary.LittleEndian.Uint64(hdr[frameSize+8:]))),
		Kind: hdr[frameSize+16],
	}
	if rec.Seq <= after && rec.Seq > 0 {
		return rec, frameSize + n, nil // skipped: not verified, it was on open
	}
	p := make([]byte, n)
	if _, err := r.ReadAt(p, off+frameSize); err != nil {
		return nil, 0, err
	}
	if crc32.Checksum(p, crcTable) != binary.LittleEndian.Uint32(hdr[4:]) {
		return nil, 0, errTorn
	}
	rec.Data = p[headSize:]
	return rec, frameSize + n, nil
}

// journal is the append-only record file of one command. Seqs are
// assigned here, in order across stdout and stderr. Writers and the size
// readers may read up to are guarded by mu; readers use their own file.
type journal struct {
	id     string
	path   string
	retain int64

	mu        sync.Mutex
	f         *os.File // nil once the command has ended
	size      int64    // bytes of whole records
	lastSeq   int64
	retained  int64 // output bytes kept
	dropped   int64 // output bytes dropped after the truncated event
	truncated bool
	terminal  *record // the exit or final state record; nil while running
	spec      []byte  // the accept record's data
	dirty     bool    // written since the last fsync
	notify    chan struct{}
	werr      error // the first write error, logged once
	// reserved is the end of the space allocated for the journal, past
	// size by at least endReserve while output is appended (see
	// endReserve); noReserve: the file system cannot preallocate.
	reserved  int64
	noReserve bool
	// full: output did not fit on the disk; no more is taken.
	full bool
	// archive holds the command's whole output, past the retention bound
	// too, up to MaxArchiveBytes (see ArchivePath); nil once closed.
	archive  *os.File
	archived int64
}

// MaxArchiveBytes bounds a command's output archive.
const MaxArchiveBytes = 1 << 30

// ArchivePath returns the path of a command's output archive in a
// supervisor directory: the command's whole output (up to MaxArchiveBytes)
// as frames of [u8 stream: 1 stdout, 2 stderr][u32 LE length][bytes], in
// the order written. It is complete once the command's terminal event is
// journaled; a command lost in a supervisor crash has a partial archive.
func ArchivePath(dir, id string) string {
	return filepath.Join(dir, "commands", id+".out")
}

// archiveLocked appends output to the archive; mu is held. A write
// error closes the archive; one for lack of space is returned.
func (j *journal) archiveLocked(kind byte, p []byte) error {
	if j.archive == nil || j.archived >= MaxArchiveBytes {
		return nil
	}
	if rest := MaxArchiveBytes - j.archived; int64(len(p)) > rest {
		p = p[:rest]
	}
	frame := make([]byte, 5+len(p))
	frame[0] = kind
	binary.LittleEndian.PutUint32(frame[1:5], uint32(len(p)))
	copy(frame[5:], p)
	if _, err := j.archive.Write(frame); err != nil {
		j.archive.Close()
		j.archive = nil
		if noSpace(err) {
			return fmt.Errorf("write output archive: %w", err)
		}
		return nil
	}
	j.archived += int64(len(p))
	return nil
}

// reserveLocked makes sure that n more bytes and then endReserve fit in
// the space allocated for the journal; mu is held. It fails only for lack
// of space: on a file system that cannot preallocate, it reserves nothing.
func (j *journal) reserveLocked(n int64) error {
	if j.noReserve || j.reserved-j.size >= n+endReserve {
		return nil
	}
	size := n + endReserve + reserveStep
	err := unix.Fallocate(int(j.f.Fd()), unix.FALLOC_FL_KEEP_SIZE, j.size, size)
	switch {
	case err == nil:
		j.reserved = j.size + size
	case noSpace(err):
		return fmt.Errorf("reserve journal space: %w", err)
	default:
		j.noReserve = true
	}
	return nil
}

// releaseLocked gives back the space reserved past the journal's end;
// mu is held and the terminal record is written. It frees as much as a
// supervisor ever reserves, so that the reserve of one that died (a
// journal opened at start and ended lost) is given back too.
func (j *journal) releaseLocked() {
	if !j.noReserve {
		unix.Fallocate(int(j.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, j.size, maxReserve)
	}
	j.f.Truncate(j.size) // and what a failed write left past the end
	j.reserved = 0
}

// fullLocked records that the disk is full; mu is held.
func (j *journal) fullLocked(err error) error {
	j.full = true
	return fmt.Errorf("%w: %w", errDiskFull, err)
}

func journalPath(dir, id string) string { return filepath.Join(dir, id+".journal") }

// createJournal creates the journal of a new command and makes its accept
// record durable (the file and its directory entry are fsynced) before it
// returns, so that a command is never started without a trace on disk.
func createJournal(dir, id string, spec []byte, retain int64) (*journal, error) {
	path := journalPath(dir, id)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create journal: %w", err)
	}
	b := (&record{Time: time.Now(), Kind: kindAccept, Data: spec}).encode()
	j := &journal{id: id, path: path, retain: retain, f: f, spec: spec, notify: make(chan struct{})}
	if err := j.reserveLocked(int64(len(b))); err != nil {
		// Refused before anything is journaled: the command never existed.
		f.Close()
		os.Remove(path)
		return nil, bothy.Errorf(bothy.EINSUFFICIENT, "no room on the lease's disk for a new command: %v", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("write accept record: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("sync journal: %w", err)
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	archive, err := os.OpenFile(filepath.Join(dir, id+".out"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("create output archive: %w", err)
	}
	j.size, j.archive = int64(len(b)), archive
	return j, nil
}

// openJournal reads an existing journal, verifies every record and cuts a
// torn or corrupt tail off at the last good record. A journal whose accept
// record is not whole is an error: the command never durably existed.
func openJournal(dir, id string, retain int64) (*journal, error) {
	path := journalPath(dir, id)
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat journal: %w", err)
	}
	j := &journal{id: id, path: path, retain: retain, f: f, notify: make(chan struct{})}
	end := fi.Size()
	var off int64
	for off < end {
		rec, n, err := readRecord(f, off, end, -1)
		if errors.Is(err, errTorn) {
			break
		} else if err != nil {
			f.Close()
			return nil, fmt.Errorf("read journal: %w", err)
		}
		if off == 0 {
			if rec.Kind != kindAccept {
				break
			}
			j.spec = rec.Data
		} else if rec.Seq != j.lastSeq+1 || rec.Kind == kindAccept || j.terminal != nil {
			break // out of order: treat as a torn tail
		} else {
			j.lastSeq = rec.Seq
			switch rec.Kind {
			case kindStdout, kindStderr:
				j.retained += int64(len(rec.Data))
			case kindTruncated:
				j.truncated = true
			case kindExit, kindState:
				j.terminal = rec
			}
		}
		off += n
	}
	if off == 0 {
		f.Close()
		return nil, bothy.Errorf(bothy.ECORRUPT, "journal %s has no whole accept record", path)
	}
	if off < end {
		if err := f.Truncate(off); err != nil {
			f.Close()
			return nil, fmt.Errorf("truncate torn journal tail: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("sync journal: %w", err)
		}
	}
	j.size = off
	if j.terminal != nil {
		f.Close()
		j.f = nil
	}
	return j, nil
}

// appendLocked writes one record; mu is held.
func (j *journal) appendLocked(kind byte, data []byte) error {
	if j.f == nil {
		return fmt.Errorf("journal %s is closed", j.id)
	}
	rec := &record{Seq: j.lastSeq + 1, Time: time.Now(), Kind: kind, Data: data}
	b := rec.encode()
	if _, err := j.f.WriteAt(b, j.size); err != nil {
		if j.reserved <= j.size {
			// Drop a partial record; reopen would too. Inside the
			// reserved space the next record overwrites it, and
			// truncating would give the reservation back.
			j.f.Truncate(j.size)
		}
		return fmt.Errorf("append to journal: %w", err)
	}
	j.size += int64(len(b))
	j.lastSeq = rec.Seq
	j.dirty = true
	close(j.notify)
	j.notify = make(chan struct{})
	return nil
}

// output appends command output, split into chunks, up to the retention
// bound; there it appends one truncated event and drops the rest. When
// the output does not fit on the disk (in the journal or the archive) it
// returns errDiskFull, once, and drops all output after.
func (j *journal) output(kind byte, p []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.terminal != nil || j.f == nil || j.full {
		return nil
	}
	if err := j.archiveLocked(kind, p); err != nil {
		return j.fullLocked(err)
	}
	if j.truncated {
		j.dropped += int64(len(p))
		return nil
	}
	keep := p
	if rest := j.retain - j.retained; int64(len(p)) > rest {
		keep = p[:max(rest, 0)]
	}
	for rest := keep; len(rest) > 0; {
		n := min(len(rest), maxChunk)
		if err := j.appendOutputLocked(kind, rest[:n]); err != nil {
			return err
		}
		j.retained += int64(n)
		rest = rest[n:]
	}
	if len(keep) < len(p) {
		j.truncated = true
		j.dropped += int64(len(p) - len(keep))
		fields := fmt.Sprintf(`{"retained_bytes":%d}`, j.retained)
		return j.appendOutputLocked(kindTruncated, []byte(fields))
	}
	return nil
}

// appendOutputLocked appends a record that is not the last, keeping room
// for the end; mu is held.
func (j *journal) appendOutputLocked(kind byte, data []byte) error {
	if err := j.reserveLocked(int64(frameSize + headSize + len(data))); err != nil {
		return j.fullLocked(err)
	}
	if err := j.appendLocked(kind, data); err != nil {
		if noSpace(err) {
			return j.fullLocked(err)
		}
		return err
	}
	return nil
}

// finish appends the terminal record, fsyncs the journal and closes it.
func (j *journal) finish(kind byte, data []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.terminal != nil {
		return nil
	}
	if err := j.appendLocked(kind, data); err != nil {
		return err
	}
	if j.archive != nil {
		j.archive.Sync()
		j.archive.Close()
		j.archive = nil
	}
	j.releaseLocked()
	err := j.f.Sync()
	j.terminal = &record{Seq: j.lastSeq, Kind: kind, Data: data}
	j.f.Close()
	j.f = nil
	j.dirty = false
	if err != nil {
		return fmt.Errorf("sync journal: %w", err)
	}
	return nil
}

// sync fsyncs output written since the last sync.
func (j *journal) sync() error {
	j.mu.Lock()
	f, dirty := j.f, j.dirty
	j.dirty = false
	j.mu.Unlock()
	if f == nil || !dirty {
		return nil
	}
	if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("sync journal %s: %w", j.id, err)
	}
	return nil
}

// snapshot returns how far readers may read, whether the command has
// ended, and a channel closed at the next append.
func (j *journal) snapshot() (size int64, done bool, notify <-chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.size, j.terminal != nil, j.notify
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open journal directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync journal directory: %w", err)
	}
	return nil
}

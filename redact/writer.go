package redact

import "io"

// span is a run of covered bytes [s, e), in stream positions.
type span struct{ s, e int64 }

// Writer redacts a stream on its way to another writer. Bytes are held
// back only while they could still be part of an occurrence: at most
// Redactor.MaxHeld bytes, so output keeps streaming. It is not safe for
// concurrent use.
type Writer struct {
	m *matcher
	w io.Writer

	state int32 // of the automaton, after the last byte
	pos   int64 // stream position after the last byte
	// held is the stream's bytes [base, pos), not yet written.
	base int64
	held []byte
	// cover is the covered runs found that end after base, sorted and
	// merged (runs that touch are merged too).
	cover []span
	// inRun reports that the last thing written was a Marker whose run
	// may continue at base.
	inRun bool
	out   []byte
	err   error
}

// Writer returns a Writer that writes the redacted stream to w. Call
// Flush at the end of the stream.
func (r *Redactor) Writer(w io.Writer) *Writer {
	return &Writer{m: r.m, w: w}
}

// Write redacts p and writes what is final to the underlying writer, in
// at most one Write call. It returns len(p), or 0 and the underlying
// writer's error, which is then returned by every later call.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	m, s, start := w.m, w.state, w.pos
	nd, dense := m.nDense, m.dense
	for i, c := range p {
		var t int32
		if s < nd {
			t = dense[int(s)<<8|int(c)]
		} else {
			t = m.step(s, c)
		}
		s = t & stateMask
		if t&outFlag != 0 {
			end := start + int64(i) + 1
			w.addCover(end-int64(m.out[s]), end)
		}
	}
	w.state = s
	w.pos += int64(len(p))
	// No occurrence can start before pos-depth: what precedes is final.
	if err := w.emit(p, start, w.pos-int64(m.depth[s])); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is held back, and ends the stream: an occurrence that
// would continue in later writes is not recognized.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	err := w.emit(nil, w.pos, w.pos)
	w.state, w.inRun = 0, false
	return err
}

// addCover records an occurrence [s, e); e is never below an end already
// recorded.
func (w *Writer) addCover(s, e int64) {
	n := len(w.cover)
	for n > 0 && w.cover[n-1].e >= s {
		s = min(s, w.cover[n-1].s)
		n--
	}
	w.cover = append(w.cover[:n], span{s, e})
}

// emit writes the stream from base up to final: every byte before final
// is decided, and so is every covered byte. The stream's bytes
// [base, start) are in held and [start, pos) in p.
func (w *Writer) emit(p []byte, start, final int64) error {
	if len(w.cover) == 0 && len(w.held) == 0 && final > start {
		// The common case: nothing held, nothing covered.
		w.inRun = false
		w.base = final
		w.held = append(w.held, p[final-start:]...)
		return w.write(p[:final-start])
	}
	out := w.out[:0]
	raw := func(from, to int64) {
		if from >= to {
			return
		}
		if from < start {
			out = append(out, w.held[from-w.base:min(to, start)-w.base]...)
			from = start
		}
		if from < to {
			out = append(out, p[from-start:to-start]...)
		}
		w.inRun = false
	}
	cur, i := w.base, 0
	for ; i < len(w.cover); i++ {
		c := w.cover[i]
		if c.s > cur {
			if c.s > final {
				break
			}
			raw(cur, c.s)
			cur = c.s
		}
		if !w.inRun {
			out = append(out, Marker...)
			w.inRun = true
		}
		cur = max(cur, c.e)
	}
	w.cover = append(w.cover[:0], w.cover[i:]...)
	if cur < final {
		raw(cur, final)
		cur = final
	}
	// Keep [cur, pos) held.
	if cur < start {
		n := copy(w.held, w.held[cur-w.base:])
		w.held = append(w.held[:n], p...)
	} else {
		w.held = append(w.held[:0], p[cur-start:]...)
	}
	w.base = cur
	w.out = out
	return w.write(out)
}

func (w *Writer) write(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if _, err := w.w.Write(b); err != nil {
		w.err = err
		return err
	}
	return nil
}

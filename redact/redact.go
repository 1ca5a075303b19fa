// Package redact removes secret values from a stream of output: every
// occurrence of a value, or of one of its common encodings, becomes
// "[REDACTED]". The supervisor runs each command's stdout and stderr
// through it before anything is journaled.
//
// Semantics: a byte is covered when it lies inside any occurrence of any
// pattern (occurrences may overlap), and each maximal run of covered bytes
// is replaced by one Marker. Redacting the union of all occurrences, not a
// greedy left-to-right choice, means overlapping occurrences ("abab" in
// "ababab") leave no fragment of a value behind. The output is a function
// of the input bytes only, whatever the chunking of the writes.
//
// What it does not catch: a value transformed in other ways (split by
// line wrapping, as `base64` does every 76 columns; JSON or shell
// escaping; compressed; reversed; printed character by character with
// other bytes between). Redaction is a last line of defense, not a
// reason to print secrets.
package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Marker replaces each redacted run of bytes.
const Marker = "[REDACTED]"

// MinValueBytes is the shortest secret value New accepts: a shorter one
// would redact too much ordinary output.
const MinValueBytes = 4

// Redactor holds the patterns of a set of secret values. It is immutable
// and safe for concurrent use; each Writer has its own state.
type Redactor struct {
	m *matcher
}

// New returns a Redactor for the secret values: empty values are ignored,
// values shorter than MinValueBytes are refused with an error (which
// does not hold the value). It replaces every occurrence of each value's
// forms with Marker: the exact bytes; standard and URL base64, padded
// and unpadded, and the three alignments in which a value appears inside
// a longer base64 stream (the value encoded after 0, 1 and 2 other
// bytes, keeping only the characters that depend on the value alone);
// hex, lower and upper case; and URL encodings: url.QueryEscape,
// url.PathEscape, and every byte %XX-encoded in lower and upper case.
func New(values [][]byte) (*Redactor, error) {
	var patterns [][]byte
	seen := make(map[string]bool)
	for i, v := range values {
		if len(v) == 0 {
			continue
		} else if len(v) < MinValueBytes {
			return nil, fmt.Errorf("secret value %d is %d bytes: values shorter than %d bytes cannot be redacted", i, len(v), MinValueBytes)
		}
		for _, p := range forms(v) {
			if len(p) > 0 && !seen[string(p)] {
				seen[string(p)] = true
				patterns = append(patterns, p)
			}
		}
	}
	return &Redactor{m: newMatcher(patterns)}, nil
}

// forms returns the byte strings that reveal v.
func forms(v []byte) [][]byte {
	out := [][]byte{slices.Clone(v)}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		out = append(out, []byte(enc.EncodeToString(v)))
		raw := enc.WithPadding(base64.NoPadding)
		out = append(out, []byte(raw.EncodeToString(v)))
		// Inside a longer stream, v starts k bytes (k = 0, 1, 2) past a
		// 3-byte group boundary. Character i encodes bits [6i, 6i+6) of
		// the stream; those wholly inside v's bits [8k, 8k+8n) are the
		// stable part.
		for k := range 3 {
			e := raw.EncodeToString(append(make([]byte, k), v...))
			lo, hi := (8*k+5)/6, (8*k+8*len(v))/6
			out = append(out, []byte(e[lo:hi]))
		}
	}
	h := hex.EncodeToString(v)
	hu := strings.ToUpper(h)
	out = append(out, []byte(h), []byte(hu))
	s := string(v)
	out = append(out, []byte(url.QueryEscape(s)), []byte(url.PathEscape(s)))
	lower, upper := make([]byte, 0, 3*len(v)), make([]byte, 0, 3*len(v))
	for i := range v {
		lower = append(lower, '%', h[2*i], h[2*i+1])
		upper = append(upper, '%', hu[2*i], hu[2*i+1])
	}
	return append(out, lower, upper)
}

// MaxHeld is the most bytes a Writer of r holds back: the longest
// pattern's length minus one (0 without patterns).
func (r *Redactor) MaxHeld() int {
	return max(r.m.maxLen-1, 0)
}

// Bytes returns b with every occurrence redacted. It equals what a Writer
// writes for b, whatever the chunking, once flushed.
func (r *Redactor) Bytes(b []byte) []byte {
	var buf bytes.Buffer
	buf.Grow(len(b))
	w := r.Writer(&buf)
	w.Write(b)
	w.Flush()
	return buf.Bytes()
}

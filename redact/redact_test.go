package redact_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/bothyhq/bothy/redact"
)

// reference redacts in naively: it marks every byte inside any occurrence
// of any form of any value, then replaces each run of marked bytes.
func reference(values [][]byte, in []byte) []byte {
	var pats [][]byte
	for _, v := range values {
		if len(v) > 0 {
			pats = append(pats, redact.Forms(v)...)
		}
	}
	covered := make([]bool, len(in))
	for i := range in {
		for _, p := range pats {
			if len(p) > 0 && bytes.HasPrefix(in[i:], p) {
				for j := i; j < i+len(p); j++ {
					covered[j] = true
				}
			}
		}
	}
	var out []byte
	for i, b := range in {
		if !covered[i] {
			out = append(out, b)
		} else if i == 0 || !covered[i-1] {
			out = append(out, redact.Marker...)
		}
	}
	return out
}

func mustNew(t testing.TB, values ...string) *redact.Redactor {
	t.Helper()
	var vs [][]byte
	for _, v := range values {
		vs = append(vs, []byte(v))
	}
	r, err := redact.New(vs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNew(t *testing.T) {
	t.Run("ErrShort", func(t *testing.T) {
		_, err := redact.New([][]byte{[]byte("long-enough"), []byte("abc")})
		if err == nil || strings.Contains(err.Error(), "abc") {
			t.Fatalf("a 3-byte value: %v", err)
		}
	})
	t.Run("EmptyIgnored", func(t *testing.T) {
		r, err := redact.New([][]byte{{}, nil})
		if err != nil {
			t.Fatal(err)
		}
		in := []byte("nothing to hide\n")
		if got := r.Bytes(in); !bytes.Equal(got, in) {
			t.Fatalf("got %q", got)
		}
		if r.MaxHeld() != 0 {
			t.Fatalf("MaxHeld %d", r.MaxHeld())
		}
	})
}

func TestRedactor_Bytes(t *testing.T) {
	const secret = "s3cr3t/V4lue+x y&z~é"
	r := mustNew(t, secret)
	v := []byte(secret)
	var pct strings.Builder
	for _, b := range v {
		fmt.Fprintf(&pct, "%%%02X", b)
	}
	forms := map[string]string{
		"exact":          secret,
		"base64":         base64.StdEncoding.EncodeToString(v),
		"base64 raw":     base64.RawStdEncoding.EncodeToString(v),
		"base64url":      base64.URLEncoding.EncodeToString(v),
		"base64url raw":  base64.RawURLEncoding.EncodeToString(v),
		"hex":            hex.EncodeToString(v),
		"HEX":            strings.ToUpper(hex.EncodeToString(v)),
		"query escape":   url.QueryEscape(secret),
		"path escape":    url.PathEscape(secret),
		"percent upper":  pct.String(),
		"percent lower":  strings.ToLower(pct.String()),
		"in a url query": "https://x.test/?token=" + url.QueryEscape(secret),
	}
	for name, form := range forms {
		in := "before " + form + " after\n"
		got := string(r.Bytes([]byte(in)))
		want := "before " + strings.ReplaceAll(form, strings.TrimPrefix(form, "https://x.test/?token="), redact.Marker) + " after\n"
		if got != want {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}
	// Inside a longer base64 stream, at each alignment, in both alphabets:
	// only the characters that mix in the neighbours' bits survive.
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for _, prefix := range []string{"", "a", "ab", "abc", "abcd"} {
			stream := enc.EncodeToString([]byte(prefix + secret + "; more bytes after it"))
			got := string(r.Bytes([]byte(stream)))
			if !strings.Contains(got, redact.Marker) || len(got) > len(stream)-len(secret)+len(redact.Marker) {
				t.Errorf("base64 of %q+secret+…: %q from %q", prefix, got, stream)
			}
		}
	}
	t.Run("Overlapping", func(t *testing.T) {
		r := mustNew(t, "abab")
		for in, want := range map[string]string{
			"xabababy":   "x[REDACTED]y", // two overlapping occurrences: no "ab" left
			"abababab":   "[REDACTED]",
			"ababXabab":  "[REDACTED]X[REDACTED]",
			"aba bab ab": "aba bab ab",
		} {
			if got := string(r.Bytes([]byte(in))); got != want {
				t.Errorf("%q: got %q, want %q", in, got, want)
			}
		}
	})
	t.Run("SeveralValues", func(t *testing.T) {
		r := mustNew(t, "first-secret", "second-secret", "")
		got := string(r.Bytes([]byte("a first-secret b second-secret c first-secondsecret")))
		if got != "a [REDACTED] b [REDACTED] c first-secondsecret" {
			t.Errorf("got %q", got)
		}
	})
}

// values of the chunking tests: a periodic one (overlaps), one with URL
// specials, and a binary one.
var testValues = [][]byte{[]byte("abab"), []byte("p4ss word/+="), {0, 0xff, '\n', 'a', 'b', 0x80}}

// recipe turns fuzz-like bytes into a stream rich in occurrences: a byte
// of 0xe0 or more inserts a whole pattern, one of 0xc0 to 0xdf a prefix
// of one, others stand for themselves.
func recipe(b []byte) []byte {
	var pats [][]byte
	for _, v := range testValues {
		pats = append(pats, redact.Forms(v)...)
	}
	var out []byte
	for _, c := range b {
		switch p := pats[int(c)%len(pats)]; {
		case c >= 0xe0:
			out = append(out, p...)
		case c >= 0xc0:
			out = append(out, p[:len(p)/2+int(c)%2]...)
		default:
			out = append(out, c)
		}
	}
	return out
}

// chunked writes in through a Writer in chunks cut at cuts, and returns
// what reached the underlying writer.
func chunked(t testing.TB, r *redact.Redactor, in []byte, cuts ...int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := r.Writer(&buf)
	last := 0
	for _, c := range append(cuts, len(in)) {
		if n, err := w.Write(in[last:c]); err != nil || n != c-last {
			t.Fatalf("write: %d, %v", n, err)
		}
		last = c
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestWriter_SplitPoints(t *testing.T) {
	r, err := redact.New(testValues)
	if err != nil {
		t.Fatal(err)
	}
	inputs := [][]byte{
		[]byte("xabababy"),
		[]byte("p4ss word/+= and cDRzcyB3b3JkLys9 and p4ss+word%2F%2B%3D."),
		recipe([]byte("a\xe0b\xe1\xe2c\xc3\xe4ab\xe5\xe6\xe7\xc8\xe9")),
		recipe([]byte("\xea\xeb\xec\xed\xee\xef\xf0\xf1\xf2\xf3\xf4\xf5\xf6\xf7\xf8\xf9\xfa\xfb\xfc\xfd\xfe\xff")),
		recipe([]byte("\xc0\xc1\xc2\xc3 \xc4\xc5\xc6\xc7 \xc8\xc9\xca\xcb \xcc\xcd\xce\xcf")),
		append([]byte("abababababa"), testValues[2]...),
	}
	for n, in := range inputs {
		want := reference(testValues, in)
		if got := r.Bytes(in); !bytes.Equal(got, want) {
			t.Fatalf("input %d: Bytes %q, reference %q", n, got, want)
		}
		for i := 0; i <= len(in); i++ {
			if got := chunked(t, r, in, i); !bytes.Equal(got, want) {
				t.Fatalf("input %d split at %d: %q, want %q", n, i, got, want)
			}
		}
		if len(in) > 80 {
			continue
		}
		for i := 0; i <= len(in); i++ {
			for j := i; j <= len(in); j++ {
				if got := chunked(t, r, in, i, j); !bytes.Equal(got, want) {
					t.Fatalf("input %d split at %d and %d: %q, want %q", n, i, j, got, want)
				}
			}
		}
	}
}

func TestWriter_Streams(t *testing.T) {
	r := mustNew(t, "topsecretvalue")
	var buf bytes.Buffer
	w := r.Writer(&buf)
	// A line ends at a byte that starts no pattern: all of it is out.
	w.Write([]byte("a plain line\n"))
	if buf.String() != "a plain line\n" {
		t.Fatalf("after a line: %q", buf.String())
	}
	// The start of a value is held, and only that.
	w.Write([]byte("xx\ntopsec"))
	if buf.String() != "a plain line\nxx\n" {
		t.Fatalf("after a prefix: %q", buf.String())
	}
	w.Write([]byte("retvalue\n"))
	if buf.String() != "a plain line\nxx\n[REDACTED]\n" {
		t.Fatalf("after the rest: %q", buf.String())
	}
	// A prefix that never completes is written at Flush.
	w.Write([]byte("topsecretvalu"))
	w.Flush()
	if buf.String() != "a plain line\nxx\n[REDACTED]\ntopsecretvalu" {
		t.Fatalf("after flush: %q", buf.String())
	}
}

func TestWriter_HeldBound(t *testing.T) {
	r, err := redact.New(testValues)
	if err != nil {
		t.Fatal(err)
	}
	// Every pattern but its last byte, each followed by a byte that
	// starts none: a stream with no occurrence that keeps the Writer
	// holding.
	var in []byte
	for _, v := range testValues {
		for _, p := range redact.Forms(v) {
			if c := p[:len(p)-1]; bytes.Equal(reference(testValues, c), c) {
				in = append(append(in, c...), '!')
			}
		}
	}
	if !bytes.Equal(reference(testValues, in), in) {
		t.Fatal("the test stream holds an occurrence")
	}
	var out bytes.Buffer
	w := r.Writer(&out)
	most := 0
	for i, c := range in {
		w.Write([]byte{c})
		held := i + 1 - out.Len()
		if held > r.MaxHeld() {
			t.Fatalf("after %d bytes %d are held, more than %d", i+1, held, r.MaxHeld())
		}
		most = max(most, held)
	}
	w.Flush()
	if !bytes.Equal(out.Bytes(), in) || most < r.MaxHeld()/2 {
		t.Fatalf("held at most %d of %d; output equal: %v", most, r.MaxHeld(), bytes.Equal(out.Bytes(), in))
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	f.n++
	return 0, errors.New("disk full")
}

func TestWriter_ErrSticky(t *testing.T) {
	r := mustNew(t, "topsecretvalue")
	f := &failWriter{}
	w := r.Writer(f)
	if n, err := w.Write([]byte("hello\n")); n != 0 || err == nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	if _, err := w.Write([]byte("again\n")); err == nil || w.Flush() == nil || f.n != 1 {
		t.Fatalf("the error is not sticky: %v, %d writes", err, f.n)
	}
}

package redact_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/bothyhq/bothy/redact"
)

// FuzzWriter checks that any chunking of a stream, empty writes included,
// writes exactly Bytes of the whole stream, and that Bytes agrees with
// the naive reference.
func FuzzWriter(f *testing.F) {
	r, err := redact.New(testValues)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("xabababy"), uint64(1))
	f.Add([]byte("a\xe0b\xe1\xe2c\xc3\xe4ab\xe5\xe6\xe7\xc8\xe9"), uint64(7))
	f.Add([]byte("\xea\xeb\xec\xed\xee\xef\xf0\xf1\xf2\xf3\xf4\xf5\xf6\xf7\xf8\xf9\xfa\xfb\xfc\xfd\xfe\xff"), uint64(42))
	f.Add([]byte("\xc0\xc1\xc2\xc3 \xc4\xc5\xc6\xc7 \xc8\xc9\xca\xcb \xcc\xcd\xce\xcf"), uint64(3))
	f.Fuzz(func(t *testing.T, b []byte, seed uint64) {
		if len(b) > 512 {
			return
		}
		in := recipe(b)
		whole := r.Bytes(in)
		if want := reference(testValues, in); !bytes.Equal(whole, want) {
			t.Fatalf("Bytes(%q) = %q, reference %q", in, whole, want)
		}
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		var cuts []int
		for c := 0; ; {
			c += rng.IntN(24)
			if c >= len(in) {
				break
			}
			cuts = append(cuts, c)
		}
		if got := chunked(t, r, in, cuts...); !bytes.Equal(got, whole) {
			t.Fatalf("chunks cut at %v: %q, want %q", cuts, got, whole)
		}
	})
}

// TestWriter_Random is FuzzWriter's property on generated streams, so
// that every test run covers many chunkings.
func TestWriter_Random(t *testing.T) {
	r, err := redact.New(testValues)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, rng.IntN(64))
		for i := range b {
			if rng.IntN(3) == 0 {
				b[i] = byte(0xc0 + rng.IntN(64))
			} else {
				b[i] = "ab!\n"[rng.IntN(4)]
			}
		}
		in := recipe(b)
		want := reference(testValues, in)
		var cuts []int
		for c := 0; ; {
			c += rng.IntN(16)
			if c >= len(in) {
				break
			}
			cuts = append(cuts, c)
		}
		if got := chunked(t, r, in, cuts...); !bytes.Equal(got, want) {
			t.Fatalf("%q cut at %v: %q, want %q", in, cuts, got, want)
		}
	}
}

// benchSecrets returns n token-like secrets of 40 bytes.
func benchSecrets(n int) [][]byte {
	rng := rand.New(rand.NewPCG(9, 9))
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	var vs [][]byte
	for range n {
		v := make([]byte, 40)
		for i := range v {
			v[i] = alnum[rng.IntN(len(alnum))]
		}
		vs = append(vs, v)
	}
	return vs
}

// benchText is 64 KiB of log-like output: words, numbers, hex digests,
// base64, and one secret every 16 KiB.
func benchText(secrets [][]byte) []byte {
	rng := rand.New(rand.NewPCG(3, 4))
	words := []string{"build", "step", "ok", "error:", "fetching", "https://example.test/path?q=1", "go", "test", "PASS", "=>", "{\"level\":\"info\"}"}
	var b bytes.Buffer
	for b.Len() < 64<<10 {
		switch rng.IntN(8) {
		case 0:
			fmt.Fprintf(&b, "sha256:%064x\n", rng.Uint64())
		case 1:
			fmt.Fprintf(&b, "%d.%03d ", rng.IntN(100000), rng.IntN(1000))
		case 2:
			fmt.Fprintf(&b, "dGhpcyBpcyBiYXNlNjQgb2Ygc29tZXRoaW5n%d ", rng.IntN(10))
		default:
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(" \n"[rng.IntN(2)])
		}
		if b.Len()%(16<<10) < 40 {
			b.Write(secrets[rng.IntN(len(secrets))])
		}
	}
	return b.Bytes()[:64<<10]
}

// BenchmarkWriter redacts 64 KiB chunks of log-like text for 10 secrets.
func BenchmarkWriter(b *testing.B) {
	secrets := benchSecrets(10)
	r, err := redact.New(secrets)
	if err != nil {
		b.Fatal(err)
	}
	chunk := benchText(secrets)
	w := r.Writer(io.Discard)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		w.Write(chunk)
	}
	w.Flush()
}

// BenchmarkNew_MaxSecret builds a Redactor for one secret of the largest
// size, bothy.MaxSecretBytes.
func BenchmarkNew_MaxSecret(b *testing.B) {
	v := bytes.Repeat(benchSecrets(1)[0], (64<<10)/40)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := redact.New([][]byte{v}); err != nil {
			b.Fatal(err)
		}
	}
}

package checkpoint_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
)

func sampleTrees() []*checkpoint.Tree {
	var h1, h2 checkpoint.Hash
	h1[0], h2[31] = 1, 2
	return []*checkpoint.Tree{
		{},
		{Entries: []checkpoint.Entry{{Name: "a", Type: checkpoint.TypeFile, Mode: 0o644}}},
		{Entries: []checkpoint.Entry{
			{Name: ".hidden", Type: checkpoint.TypeSymlink, Mode: 0o777, Size: 9, ModTime: -5, Target: "../target"},
			{Name: "big", Type: checkpoint.TypeFile, Mode: 0o755, Size: 5 << 20, ModTime: 1700000000123456789,
				Chunks: []checkpoint.Chunk{{Hash: h1, Size: 1 << 20}, {Hash: h2, Size: 4 << 20}}},
			{Name: "bin", Type: checkpoint.TypeDir, Mode: 0o755, Tree: h1},
			{Name: strings.Repeat("z", 255), Type: checkpoint.TypeFile, Mode: 0o600, Size: 3, Chunks: []checkpoint.Chunk{{Hash: h2, Size: 3}}},
		}},
	}
}

func TestTree_Encode(t *testing.T) {
	for _, tr := range sampleTrees() {
		b := tr.Encode()
		got, err := checkpoint.DecodeTree(b)
		if err != nil {
			t.Fatalf("DecodeTree(Encode(%v)): %v", tr, err)
		}
		if !bytes.Equal(got.Encode(), b) {
			t.Errorf("round trip changed the encoding of %v", tr)
		}
	}
	tr := sampleTrees()[2]
	if e, ok := tr.Find("big"); !ok || e.Size != 5<<20 {
		t.Errorf("Find(big) = %v, %v", e, ok)
	}
	if _, ok := tr.Find("nope"); ok {
		t.Error("Find(nope) found something")
	}
	bad := [][]byte{
		nil, {0}, {2, 0}, {1, 1}, append(tr.Encode(), 0),
		(&checkpoint.Tree{Entries: []checkpoint.Entry{{Name: "b", Type: 1}, {Name: "a", Type: 1}}}).Encode(),
		(&checkpoint.Tree{Entries: []checkpoint.Entry{{Name: "a", Type: 1}, {Name: "a", Type: 1}}}).Encode(),
		(&checkpoint.Tree{Entries: []checkpoint.Entry{{Name: "..", Type: 2}}}).Encode(),
		(&checkpoint.Tree{Entries: []checkpoint.Entry{{Name: "a/b", Type: 1}}}).Encode(),
		(&checkpoint.Tree{Entries: []checkpoint.Entry{{Name: "a", Type: 9}}}).Encode(),
		(&checkpoint.Tree{Entries: []checkpoint.Entry{{Name: "a", Type: 1, Size: 4}}}).Encode(),
		(&checkpoint.Tree{Entries: []checkpoint.Entry{{Name: "a", Type: 3}}}).Encode(),
	}
	for _, b := range bad {
		if _, err := checkpoint.DecodeTree(b); bothy.ErrorCode(err) != bothy.ECORRUPT {
			t.Errorf("DecodeTree(%x) = %v, want ECORRUPT", b, err)
		}
	}
}

func TestParseHash(t *testing.T) {
	var h checkpoint.Hash
	h[3] = 0xab
	got, err := checkpoint.ParseHash(h.String())
	if err != nil || got != h {
		t.Errorf("ParseHash(%s) = %v, %v", h, got, err)
	}
	for _, s := range []string{"", "xyz", strings.Repeat("A", 64), strings.Repeat("0", 63)} {
		if _, err := checkpoint.ParseHash(s); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Errorf("ParseHash(%q): %v, want EINVALID", s, err)
		}
	}
	if !(checkpoint.Hash{}).IsZero() || h.IsZero() {
		t.Error("IsZero")
	}
}

func FuzzDecodeTree(f *testing.F) {
	for _, tr := range sampleTrees() {
		f.Add(tr.Encode())
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{1, 1, 1, 'a', 1, 0x80, 0x00, 0, 0, 0})
	f.Add([]byte("junk that is not a tree"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := checkpoint.DecodeTree(b)
		if err != nil {
			if bothy.ErrorCode(err) != bothy.ECORRUPT {
				t.Fatalf("error %v is not ECORRUPT", err)
			}
			return
		}
		if !bytes.Equal(tr.Encode(), b) {
			t.Fatalf("Encode(DecodeTree(%x)) = %x", b, tr.Encode())
		}
	})
}

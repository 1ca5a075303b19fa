package mountinfo_test

import (
	"testing"

	"github.com/bothyhq/bothy/mountinfo"
)

func TestParse(t *testing.T) {
	line := `36 35 98:0 / /mnt/my\040dir rw,noatime master:1 - overlay overlay rw,lowerdir=/a\040b,upperdir=/u,workdir=/w`
	m, ok := mountinfo.Parse(line)
	if !ok {
		t.Fatal("Parse refused a valid line")
	}
	if m.Point != "/mnt/my dir" || m.FSType != "overlay" || m.Source != "overlay" {
		t.Fatalf("Parse = %+v", m)
	}
	if v, ok := m.Option("lowerdir"); !ok || v != "/a b" {
		t.Fatalf("lowerdir = %q, %v", v, ok)
	}
	if _, ok := m.Option("metacopy"); ok {
		t.Fatal("an absent option was found")
	}
	if _, ok := mountinfo.Parse("36 35 98:0 / /mnt"); ok {
		t.Fatal("Parse accepted a line without its separator")
	}
}

func TestMounted(t *testing.T) {
	if ok, err := mountinfo.Mounted("/"); err != nil || !ok {
		t.Fatalf("Mounted(/) = %v, %v", ok, err)
	}
	if ok, err := mountinfo.Mounted("/no/such/mount/point"); err != nil || ok {
		t.Fatalf("Mounted(missing) = %v, %v", ok, err)
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`a\040b`: "a b", `plain`: "plain", `tab\011`: "tab\t", `bad\09x`: `bad\09x`, `end\04`: `end\04`} {
		if got := mountinfo.Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

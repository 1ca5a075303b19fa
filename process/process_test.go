package process_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/process"
	"github.com/bothyhq/bothy/providertest"
)

func TestProvider(t *testing.T) {
	providertest.TestProvider(t, func(t *testing.T) bothy.Provider { return process.New() })
}

func TestProvider_Exec(t *testing.T) {
	p := process.New()
	ws := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("in", filepath.Join(ws, "inlink")); err != nil {
		t.Fatal(err)
	}
	h, _ := providertest.Start(t, p, bothy.LeaseSpec{Workspace: ws})

	t.Run("ErrSymlinkEscape", func(t *testing.T) {
		for _, cwd := range []string{"out", "out/", "in/../out"} {
			_, err := p.Exec(context.Background(), h, bothy.ExecSpec{Argv: []string{"pwd"}, Cwd: cwd})
			if code := bothy.ErrorCode(err); code != bothy.EINVALIDPATH {
				t.Errorf("cwd %q: error %v, want %s", cwd, err, bothy.EINVALIDPATH)
			}
		}
	})
	t.Run("SymlinkInside", func(t *testing.T) {
		res, out, _ := providertest.Exec(t, p, h, bothy.ExecSpec{Argv: []string{"pwd", "-P"}, Cwd: "inlink"})
		if res.ExitCode != 0 || out != filepath.Join(ws, "in")+"\n" {
			t.Fatalf("result %+v stdout %q", res, out)
		}
	})
	t.Run("ErrNotDirectory", func(t *testing.T) {
		os.WriteFile(filepath.Join(ws, "file"), nil, 0o644)
		_, err := p.Exec(context.Background(), h, bothy.ExecSpec{Argv: []string{"pwd"}, Cwd: "file"})
		if code := bothy.ErrorCode(err); code != bothy.EINVALIDPATH {
			t.Errorf("error %v, want %s", err, bothy.EINVALIDPATH)
		}
	})
}

package localblob_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy/blobtest"
)

const (
	helperDirEnv  = "BOTHY_LOCALBLOB_HELPER_DIR"
	helperGoEnv   = "BOTHY_LOCALBLOB_HELPER_GO"
	helperKeys    = 16
	helperBlobLen = 1 << 20
)

func helperKey(i int) string { return fmt.Sprintf("packs/t/%02d", i) }

func helperData(i int) []byte { return blobtest.Bytes(uint64(1000+i), helperBlobLen+i) }

// TestStore_PutBlob_CrossProcess races PutBlob on the same keys from several
// processes sharing one directory: each key is created by exactly one.
func TestStore_PutBlob_CrossProcess(t *testing.T) {
	const procs = 4
	dir := t.TempDir()
	start := filepath.Join(t.TempDir(), "go")

	var (
		cmds []*exec.Cmd
		outs []*bytes.Buffer
	)
	for range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperDirEnv+"="+dir, helperGoEnv+"="+start)
		out := new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	// Release the children together, once all are ready, so their puts overlap.
	deadline := time.Now().Add(time.Minute)
	for {
		ready, _ := filepath.Glob(start + ".ready.*")
		if len(ready) == procs {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%d of %d children ready", len(ready), procs)
		}
		time.Sleep(time.Millisecond)
	}
	if err := os.WriteFile(start, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	created := map[string]int{}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i])
		}
		var n int
		for _, line := range strings.Split(outs[i].String(), "\n") {
			if key, ok := strings.CutPrefix(line, "created "); ok {
				created[key]++
				n++
			}
		}
		t.Logf("child %d created %d of %d keys", i, n, helperKeys)
	}

	s := MustOpen(t, dir)
	for i := range helperKeys {
		key := helperKey(i)
		if created[key] != 1 {
			t.Errorf("%s created %d times across processes, want 1", key, created[key])
		}
		if got := blobtest.MustGet(t, s, key); !bytes.Equal(got, helperData(i)) {
			t.Errorf("%s content mismatch (%d bytes)", key, len(got))
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, "~tmp"))
	if err != nil {
		t.Fatal(err)
	} else if len(entries) != 0 {
		t.Errorf("%d temporary files left behind", len(entries))
	}
}

// TestHelperProcess is a child of TestStore_PutBlob_CrossProcess; it does
// nothing in a normal test run.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		return // return, not skip: this is no suite that could not run
	}
	s := MustOpen(t, dir)
	data := make([][]byte, helperKeys)
	for i := range data {
		data[i] = helperData(i)
	}
	start := os.Getenv(helperGoEnv)
	if err := os.WriteFile(fmt.Sprintf("%s.ready.%d", start, os.Getpid()), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(start); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("start signal never came")
		}
		time.Sleep(time.Millisecond)
	}
	for i := range helperKeys {
		created, err := s.PutBlob(context.Background(), helperKey(i), bytes.NewReader(data[i]), int64(len(data[i])))
		if err != nil {
			t.Fatal(err)
		}
		if created {
			fmt.Printf("created %s\n", helperKey(i))
		}
	}
}

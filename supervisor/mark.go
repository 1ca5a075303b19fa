package supervisor

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// MarkFile is the name of the lease directory's mark, MarkEnv's value.
const MarkFile = "mark"

// legacyTokenEnv and legacyTokenFile are how supervisors before the mark
// tagged their commands: a restarted supervisor still kills processes
// that carry the old tag, so that an upgrade in the middle of a lease
// leaves none behind.
const (
	legacyTokenEnv  = "BOTHY_SUPERVISOR_TOKEN"
	legacyTokenFile = "token"
)

// readMark returns the lease directory's mark, creating it once.
func readMark(dir string) (string, error) {
	path := filepath.Join(dir, MarkFile)
	b, err := os.ReadFile(path)
	if err == nil && len(b) == 32 {
		return string(b), nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read mark: %w", err)
	}
	r := make([]byte, 16)
	rand.Read(r)
	mark := hex.EncodeToString(r)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(mark), 0o600); err != nil {
		return "", fmt.Errorf("write mark: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write mark: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return "", err
	}
	return mark, nil
}

// killMarked SIGKILLs every process whose environment holds the lease's
// mark (or the legacy token of dir, which it then removes): the commands
// of a supervisor that died. A process that cleared its environment
// escapes this; a sandbox provider's Stop is the real guarantee. It
// returns how many it killed.
func killMarked(dir, mark string) int {
	wants := [][]byte{[]byte(MarkEnv + "=" + mark)}
	legacy := filepath.Join(dir, legacyTokenFile)
	if tok, err := os.ReadFile(legacy); err == nil && len(tok) == 32 {
		wants = append(wants, []byte(legacyTokenEnv+"="+string(tok)))
	}
	killed := 0
	for range 5 {
		entries, _ := os.ReadDir("/proc")
		found := 0
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if err != nil {
				continue
			}
			if marked(b, wants) {
				syscall.Kill(pid, syscall.SIGKILL)
				found++
			}
		}
		if found == 0 {
			break
		}
		killed += found
		time.Sleep(20 * time.Millisecond)
	}
	os.Remove(legacy)
	return killed
}

// marked reports whether an environ file holds one of wants.
func marked(environ []byte, wants [][]byte) bool {
	for kv := range bytes.SplitSeq(environ, []byte{0}) {
		for _, w := range wants {
			if bytes.Equal(kv, w) {
				return true
			}
		}
	}
	return false
}

package sandbox

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// SecretFiles makes one sealed memory file (memfd) per entry of files,
// holding its value, for a command to inherit as file descriptors first,
// first+1, …: give them, in order, as the command's ExtraFiles starting at
// that descriptor. It returns the files and the environment variables that
// name their paths (/dev/fd/N), by the keys of files. The values are never
// on disk; only the command's processes, which inherit the descriptors,
// can open them. The caller closes the files once the command started.
func SecretFiles(files map[string]string, first int) ([]*os.File, map[string]string, error) {
	var out []*os.File
	env := make(map[string]string, len(files))
	for i, name := range slices.Sorted(maps.Keys(files)) {
		fd, err := unix.MemfdCreate("bothy-secret", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			CloseAll(out)
			return nil, nil, fmt.Errorf("memfd: %w", err)
		}
		f := os.NewFile(uintptr(fd), "secret "+name)
		out = append(out, f)
		if _, err := f.WriteString(files[name]); err != nil {
			CloseAll(out)
			return nil, nil, fmt.Errorf("write secret file: %w", err)
		}
		// Sealed, so that the command cannot change what a later read of
		// the same descriptor sees.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
			CloseAll(out)
			return nil, nil, fmt.Errorf("seal secret file: %w", err)
		}
		if _, err := f.Seek(0, 0); err != nil {
			CloseAll(out)
			return nil, nil, err
		}
		env[name] = "/dev/fd/" + strconv.Itoa(first+i)
	}
	return out, env, nil
}

// CloseAll closes files, such as those of SecretFiles.
func CloseAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

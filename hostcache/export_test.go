package hostcache

import "os"

// SetBeforeOpen sets the hook that runs between the stat and the open of
// each upper entry during Checkpoint (nil removes it).
func SetBeforeOpen(f func(dirPath, name string)) {
	if f == nil {
		beforeOpen = nil
		return
	}
	beforeOpen = func(d *os.File, name string) { f(d.Name(), name) }
}

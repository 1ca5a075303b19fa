package checkpoint

import "time"

// SetClock replaces the clock a Repo uses to date uploads (tests only).
func SetClock(r *Repo, now func() time.Time) { r.now = now }

// FrameOf returns the pack and the stored frame range that hold object h.
func FrameOf(s *Snapshot, h Hash) (pack string, off, length int64, ok bool) {
	loc, ok := s.index[h]
	if !ok {
		return "", 0, 0, false
	}
	e := loc.entry()
	return loc.table.name, e.frameOff, e.frameLen, true
}

// KeyOf returns the hash key of a Repo (tests only).
func KeyOf(r *Repo) []byte { return r.hs.key }

//go:build race

package chaos_test

// raceEnabled builds bothy with the race detector when the suite runs with it.
const raceEnabled = true

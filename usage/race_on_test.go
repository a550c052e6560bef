//go:build race

package usage

// raceEnabled reports whether the race detector is on (it makes sync.Pool
// drop items at random, so pooled paths allocate more).
const raceEnabled = true

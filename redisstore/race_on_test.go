//go:build race

package redisstore_test

// raceEnabled reports whether the race detector is on (it makes sync.Pool
// drop items at random, so pooled paths allocate more).
const raceEnabled = true

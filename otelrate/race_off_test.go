//go:build !race

package otelrate_test

// raceEnabled reports whether the race detector is on (it makes sync.Pool,
// which the SDK uses, drop items at random, so measurements allocate more).
const raceEnabled = false

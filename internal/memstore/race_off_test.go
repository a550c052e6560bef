//go:build !race

package memstore

// raceDetector reports whether the race detector is on (tests scale down
// their exhaustive passes under it, which runs them ten times slower).
const raceDetector = false

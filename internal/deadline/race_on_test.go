//go:build race

package deadline

// raceEnabled reports whether the race detector is on (it allocates on
// its own and slows calls across millisecond boundaries, so allocation
// counts are not the program's).
const raceEnabled = true

//go:build !race

package usage

const raceEnabled = false

//go:build !unix

package bench

import "time"

// clientCPU is not measured here (no getrusage): client-cpu-us/op reads 0.
func clientCPU() time.Duration { return 0 }

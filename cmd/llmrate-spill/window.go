package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"time"

	"github.com/llmrate/llmrate"
)

// The daily window scenario (-day N): the key's figures carry
// llmrate.Window{Per: 24 h, Requests: N} beside the per-minute ones, so
// every admission runs the Redis store's windowed script (leases and
// batching bypassed). Any fault scenario runs with it; the requests admitted
// are then held to the tighter of the per-minute bound and the window's.

// dayWindows is the key's windows for -day n.
func dayWindows(n int64) []llmrate.Window {
	if n == 0 {
		return nil
	}
	return []llmrate.Window{{Per: 24 * time.Hour, Requests: n}}
}

// dayBound is what one exact daily window of n requests (capacity n, no
// burst, refilling n a day) can admit in elapsed: n + n × elapsed / 24 h,
// rounded down, elapsed in whole microseconds; no bound when n is 0.
func dayBound(n int64, elapsed time.Duration) int64 {
	if n == 0 {
		return math.MaxInt64
	}
	refill := new(big.Int).Mul(big.NewInt(n), big.NewInt(elapsed.Microseconds()))
	refill.Quo(refill, big.NewInt(86_400_000_000))
	return n + refill.Int64()
}

func (c *config) validateDay() error {
	if c.DayRequests < 0 || c.DayRequests > llmrate.MaxPerMinute {
		return errors.New("-day must be in [0, 10^12] (0: no daily window)")
	}
	return nil
}

func printDay(out io.Writer, cfg config) {
	if cfg.DayRequests > 0 {
		fmt.Fprintf(out, "and a daily window on the key: %d requests per day (capacity %d, one back every %v); requests exact is the tighter of its bound and the minute's\n",
			cfg.DayRequests, cfg.DayRequests, (24 * time.Hour / time.Duration(cfg.DayRequests)).Round(time.Microsecond))
	}
}

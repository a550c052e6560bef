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

// The month scenario (-month N): the key's figures carry a calendar month
// window in UTC, llmrate.Window{Calendar: CalendarMonth, Zone: UTC,
// Requests: N}, and every worker's clock (redisstore.WithClock, standing
// for the server's, and the limiter's) is real time plus one offset the
// coordinator sends with "go", which places the 1st at 00:00 UTC -month-at
// into the run. Each period holds N requests, refilled by nothing: a run
// crossing one boundary may admit at most 2N, whatever the faults.

// monthWindows is the key's windows for -month n.
func monthWindows(n int64) []llmrate.Window {
	if n == 0 {
		return nil
	}
	return []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Requests: n}}
}

// monthBound is what a run crossing one month boundary may admit: the
// figure of each of its two periods; no bound when n is 0.
func monthBound(n int64) int64 {
	if n == 0 {
		return math.MaxInt64
	}
	return 2 * n
}

// monthOffset is the offset that makes now+at read as the 1st of the month
// after now's at 00:00 UTC.
func monthOffset(now time.Time, at time.Duration) time.Duration {
	y, m, _ := now.UTC().Date()
	next := time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
	return next.Sub(now.Add(at))
}

func (c *config) monthAt() time.Duration {
	if c.MonthAt > 0 {
		return c.MonthAt
	}
	return c.Duration / 2
}

func (c *config) validateMonth() error {
	switch {
	case c.MonthRequests < 0 || c.MonthRequests > llmrate.MaxPerMinute:
		return errors.New("-month must be in [0, 10^12] (0: no month window)")
	case c.MonthRequests > 0 && c.monthAt() >= c.Duration:
		return errors.New("-month-at must fall inside -duration")
	}
	return nil
}

func printMonth(out io.Writer, cfg config) {
	if cfg.MonthRequests > 0 {
		fmt.Fprintf(out, "and a calendar month window on the key: %d requests per month (UTC), the 1st at 00:00 placed %v into the run by one clock offset shared by the workers; requests exact is then at most 2 × %d\n",
			cfg.MonthRequests, cfg.monthAt(), cfg.MonthRequests)
	}
}

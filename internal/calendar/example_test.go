package calendar_test

import (
	"fmt"
	"time"

	"github.com/llmrate/llmrate/internal/calendar"
)

// A calendar day in Berlin at the end of summer time lasts 25 hours; a
// Havana day whose midnight does not exist starts at 01:00.
func ExamplePeriod() {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	start, end := calendar.Period(calendar.Day, berlin, time.Date(2026, 10, 25, 12, 0, 0, 0, time.UTC))
	fmt.Println(start, "→", end, end.Sub(start))

	havana, _ := time.LoadLocation("America/Havana")
	start, end = calendar.Period(calendar.Day, havana, time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC))
	fmt.Println(start, "→", end, end.Sub(start))

	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	start, _ = calendar.Period(calendar.Month, tokyo, time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC))
	fmt.Println(calendar.Month, "from", start.UTC())
	// Output:
	// 2026-10-25 00:00:00 +0200 CEST → 2026-10-26 00:00:00 +0100 CET 25h0m0s
	// 2026-03-08 01:00:00 -0400 CDT → 2026-03-09 00:00:00 -0400 CDT 23h0m0s
	// month from 2026-02-28 15:00:00 +0000 UTC
}

// A Cache answers from the period in force until the clock leaves it.
func ExampleCache() {
	var c calendar.Cache
	utc := time.UTC
	at := time.Date(2028, 2, 20, 9, 30, 0, 0, utc)
	start, end := c.Period(calendar.Month, utc, at)
	fmt.Println(start, "→", end, int(end.Sub(start)/(24*time.Hour)), "days")
	start, _ = c.Period(calendar.Month, utc, end) // the next period
	fmt.Println(start)
	// Output:
	// 2028-02-01 00:00:00 +0000 UTC → 2028-03-01 00:00:00 +0000 UTC 29 days
	// 2028-03-01 00:00:00 +0000 UTC
}

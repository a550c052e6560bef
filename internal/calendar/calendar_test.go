package calendar

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Hand-worked periods: each want is written out in UTC from the zone's rules
// as tzdata states them, not computed.

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err, "LoadLocation(%q)", name)
	return loc
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err, "time.Parse(%q)", s)
	return v
}

type handCase struct {
	name        string
	zone        string
	kind        Kind
	at          string        // RFC 3339
	start, end  string        // RFC 3339, UTC
	length      time.Duration // end - start, as the rule reads
	startsOnDay int           // the start's local day of month
}

func runHandCases(t *testing.T, cases []handCase, zone func(string) *time.Location) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			loc := zone(tc.zone)
			at := mustTime(t, tc.at)
			start, end := Period(tc.kind, loc, at)
			assert.Equal(t, mustTime(t, tc.start), start.UTC(), "Period(%v, %s, %s) start", tc.kind, tc.zone, tc.at)
			assert.Equal(t, mustTime(t, tc.end), end.UTC(), "Period(%v, %s, %s) end", tc.kind, tc.zone, tc.at)
			assert.Equal(t, tc.length, end.Sub(start), "Period(%v, %s, %s) length", tc.kind, tc.zone, tc.at)
			assert.Equal(t, tc.startsOnDay, start.Day(), "Period(%v, %s, %s) starts on local %v", tc.kind, tc.zone, tc.at, start)
			assert.Equal(t, loc, start.Location(), "Period(%v, %s, %s) start's location", tc.kind, tc.zone, tc.at)
			var c Cache
			cs, ce := c.Period(tc.kind, loc, at)
			assert.True(t, cs.Equal(start) && ce.Equal(end), "Cache.Period(%v, %s, %s) = [%v, %v)", tc.kind, tc.zone, tc.at, cs, ce)
		})
	}
}

func TestPeriodHandWorked(t *testing.T) {
	t.Parallel()
	const h = time.Hour
	runHandCases(t, []handCase{
		// Europe/Berlin: CEST ends 2026-10-25 03:00 (back to 02:00), starts 2026-03-29 02:00.
		{"berlin 25h day", "Europe/Berlin", Day, "2026-10-25T12:00:00+01:00", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z", 25 * h, 25},
		{"berlin 23h day", "Europe/Berlin", Day, "2026-03-29T12:00:00+02:00", "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z", 23 * h, 29},
		{"berlin day's last ns", "Europe/Berlin", Day, "2026-03-29T21:59:59.999999999Z", "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z", 23 * h, 29},
		{"berlin next day's first instant", "Europe/Berlin", Day, "2026-03-29T22:00:00Z", "2026-03-29T22:00:00Z", "2026-03-30T22:00:00Z", 24 * h, 30},
		{"berlin 169h week", "Europe/Berlin", Week, "2026-10-25T12:00:00+01:00", "2026-10-18T22:00:00Z", "2026-10-25T23:00:00Z", 169 * h, 19},
		{"berlin week starts monday", "Europe/Berlin", Week, "2026-12-07T23:30:00Z", "2026-12-06T23:00:00Z", "2026-12-13T23:00:00Z", 168 * h, 7},
		{"berlin 745h october", "Europe/Berlin", Month, "2026-10-15T00:00:00Z", "2026-09-30T22:00:00Z", "2026-10-31T23:00:00Z", 745 * h, 1},
		// Leap February: 29 days.
		{"utc 2028-02 29 days", "UTC", Month, "2028-02-15T00:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z", 29 * 24 * h, 1},
		{"berlin 2028-02-29 late", "Europe/Berlin", Month, "2028-02-29T23:30:00+01:00", "2028-01-31T23:00:00Z", "2028-02-29T23:00:00Z", 29 * 24 * h, 1},
		{"utc 2027-02 28 days", "UTC", Month, "2027-02-28T23:59:59Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z", 28 * 24 * h, 1},
		// Asia/Tokyo (+09, no DST): a month starts at 15:00 UTC of the day before.
		{"tokyo month", "Asia/Tokyo", Month, "2026-03-10T00:00:00Z", "2026-02-28T15:00:00Z", "2026-03-31T15:00:00Z", 31 * 24 * h, 1},
		{"tokyo day before 15:00Z", "Asia/Tokyo", Day, "2026-02-28T14:59:59Z", "2026-02-27T15:00:00Z", "2026-02-28T15:00:00Z", 24 * h, 28},
		// America/Havana: DST starts at 00:00 (to 01:00) on 2026-03-08, ends 01:00 CDT (to 00:00) on 2026-11-01.
		{"havana gap day", "America/Havana", Day, "2026-03-08T12:00:00-04:00", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z", 23 * h, 8},
		{"havana day before gap", "America/Havana", Day, "2026-03-07T12:00:00-05:00", "2026-03-07T05:00:00Z", "2026-03-08T05:00:00Z", 24 * h, 7},
		{"havana 25h day", "America/Havana", Day, "2026-11-01T12:00:00-05:00", "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z", 25 * h, 1},
		// America/Santiago: DST starts at 24:00 Saturday 2026-09-05 (Sunday begins 01:00), ends 24:00 Saturday 2026-04-04 (back to 23:00).
		{"santiago gap day", "America/Santiago", Day, "2026-09-06T12:00:00-03:00", "2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z", 23 * h, 6},
		{"santiago day before gap", "America/Santiago", Day, "2026-09-05T12:00:00-04:00", "2026-09-05T04:00:00Z", "2026-09-06T04:00:00Z", 24 * h, 5},
		{"santiago 25h day", "America/Santiago", Day, "2026-04-04T12:00:00-03:00", "2026-04-04T03:00:00Z", "2026-04-05T04:00:00Z", 25 * h, 4},
		// Asia/Beirut: DST starts 00:00 (to 01:00) 2026-03-29, ends 00:00 EEST (to 23:00) 2026-10-25.
		{"beirut gap day", "Asia/Beirut", Day, "2026-03-29T12:00:00+03:00", "2026-03-28T22:00:00Z", "2026-03-29T21:00:00Z", 23 * h, 29},
		{"beirut 25h day", "Asia/Beirut", Day, "2026-10-24T12:00:00+03:00", "2026-10-23T21:00:00Z", "2026-10-24T22:00:00Z", 25 * h, 24},
		{"beirut march", "Asia/Beirut", Month, "2026-03-15T00:00:00Z", "2026-02-28T22:00:00Z", "2026-03-31T21:00:00Z", 31*24*h - h, 1},
		// America/Asuncion (before its 2024 move to -03 all year): DST began at 00:00 on 2019-10-06.
		{"asuncion gap day", "America/Asuncion", Day, "2019-10-06T12:00:00-03:00", "2019-10-06T04:00:00Z", "2019-10-07T03:00:00Z", 23 * h, 6},
		// Pacific/Apia skipped 2011-12-30 (-10 to +14 at 24:00 on the 29th).
		{"apia day before skip", "Pacific/Apia", Day, "2011-12-29T20:00:00-10:00", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z", 24 * h, 29},
		{"apia day after skip", "Pacific/Apia", Day, "2011-12-30T10:00:00Z", "2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z", 24 * h, 31},
		{"apia 6-day week", "Pacific/Apia", Week, "2011-12-29T20:00:00-10:00", "2011-12-26T10:00:00Z", "2012-01-01T10:00:00Z", 144 * h, 26},
		{"apia 30-day december", "Pacific/Apia", Month, "2011-12-15T00:00:00Z", "2011-12-01T10:00:00Z", "2011-12-31T10:00:00Z", 720 * h, 1},
		// Pacific/Kwajalein skipped 1993-08-21 (-12 to +12 at 24:00 on the 20th).
		{"kwajalein day before skip", "Pacific/Kwajalein", Day, "1993-08-20T12:00:00-12:00", "1993-08-20T12:00:00Z", "1993-08-21T12:00:00Z", 24 * h, 20},
		{"kwajalein day after skip", "Pacific/Kwajalein", Day, "1993-08-21T12:00:00Z", "1993-08-21T12:00:00Z", "1993-08-22T12:00:00Z", 24 * h, 22},
		// America/Juneau, 1867-10-19 00:31:13Z: +15:02:19 to -08:57:41, local date back from the 19th to the 18th.
		// The 19th's period runs from its first midnight to the 20th's: 48 h, holding the repeated hours of the 18th.
		{"juneau repeated date", "America/Juneau", Day, "1867-10-19T01:00:00Z", "1867-10-18T08:57:41Z", "1867-10-20T08:57:41Z", 48 * h, 19},
		{"juneau day before", "America/Juneau", Day, "1867-10-18T08:57:40Z", "1867-10-17T08:57:41Z", "1867-10-18T08:57:41Z", 24 * h, 18},
		{"juneau 32-day october", "America/Juneau", Month, "1867-10-19T01:00:00Z", "1867-09-30T08:57:41Z", "1867-11-01T08:57:41Z", 32 * 24 * h, 1},
		// America/Phoenix, 1944-01-01 00:01 MWT (06:01Z): back to 23:01 MST on 1943-12-31, after January began.
		{"phoenix january holds repeated minutes", "America/Phoenix", Month, "1944-01-01T06:30:00Z", "1944-01-01T06:00:00Z", "1944-02-01T07:00:00Z", 31*24*h + h, 1},
		{"phoenix new year's day", "America/Phoenix", Day, "1944-01-01T06:30:00Z", "1944-01-01T06:00:00Z", "1944-01-02T07:00:00Z", 25 * h, 1},
		{"phoenix new year's eve", "America/Phoenix", Day, "1944-01-01T05:59:59Z", "1943-12-31T06:00:00Z", "1944-01-01T06:00:00Z", 24 * h, 31},
	}, func(name string) *time.Location { return mustLoad(t, name) })
}

// tzif1 encodes a version-1 TZif file (RFC 8536) with the given transitions:
// offsets[0] before trans[0], offsets[i+1] from trans[i].
func tzif1(trans []int64, offsets []int32) []byte {
	b := []byte("TZif")
	b = append(b, make([]byte, 16)...) // version 1 and reserved
	chars := []byte{}
	for range offsets {
		chars = append(chars, 'X', 0)
	}
	for _, n := range []int{0, 0, 0, len(trans), len(offsets), len(chars)} { // isut, isstd, leap, time, type, char
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	for _, x := range trans {
		b = binary.BigEndian.AppendUint32(b, uint32(int32(x)))
	}
	for i := range trans {
		b = append(b, byte(i+1))
	}
	for i, off := range offsets {
		b = binary.BigEndian.AppendUint32(b, uint32(off))
		b = append(b, 0, byte(2*i))
	}
	return append(b, chars...)
}

// skipZone is a made-up zone for what tzdata lacks: a skipped Monday
// (2024-12-30), a clock going back a whole day after midnight (2025-01-16
// 06:00 +12 to 2025-01-15 06:00 -12), and a skipped 1st (2025-02-01).
func skipZone(t *testing.T) *time.Location {
	t.Helper()
	trans := []int64{
		mustTime(t, "2024-12-30T12:00:00Z").Unix(), // Sunday 24:00 -12 → Tuesday 00:00 +12
		mustTime(t, "2025-01-15T18:00:00Z").Unix(), // Thursday 06:00 +12 → Wednesday 06:00 -12
		mustTime(t, "2025-02-01T12:00:00Z").Unix(), // Saturday 00:00 -12 → Sunday 00:00 +12
	}
	loc, err := time.LoadLocationFromTZData("Test/Skips", tzif1(trans, []int32{-12 * 3600, 12 * 3600, -12 * 3600, 12 * 3600}))
	require.NoError(t, err)
	return loc
}

func TestPeriodSkippedFirstDates(t *testing.T) {
	t.Parallel()
	loc := skipZone(t)
	const h = time.Hour
	runHandCases(t, []handCase{
		{"week before skipped monday", "", Week, "2024-12-29T12:00:00-12:00", "2024-12-23T12:00:00Z", "2024-12-30T12:00:00Z", 168 * h, 23},
		{"week of skipped monday starts tuesday", "", Week, "2024-12-30T12:00:00Z", "2024-12-30T12:00:00Z", "2025-01-05T12:00:00Z", 144 * h, 31},
		{"day after skipped monday", "", Day, "2024-12-30T13:00:00Z", "2024-12-30T12:00:00Z", "2024-12-31T12:00:00Z", 24 * h, 31},
		{"repeated wednesday belongs to thursday", "", Day, "2025-01-16T00:00:00Z", "2025-01-15T12:00:00Z", "2025-01-17T12:00:00Z", 48 * h, 16},
		{"wednesday before the repeat", "", Day, "2025-01-15T11:59:59Z", "2025-01-14T12:00:00Z", "2025-01-15T12:00:00Z", 24 * h, 15},
		{"january ends where february's 1st was skipped", "", Month, "2025-02-01T11:59:59Z", "2024-12-31T12:00:00Z", "2025-02-01T12:00:00Z", 768 * h, 1},
		{"february starts on the 2nd", "", Month, "2025-02-01T12:00:00Z", "2025-02-01T12:00:00Z", "2025-02-28T12:00:00Z", 27 * 24 * h, 2},
		{"december at -12", "", Month, "2024-12-15T00:00:00Z", "2024-12-01T12:00:00Z", "2024-12-31T12:00:00Z", 30 * 24 * h, 1},
	}, func(string) *time.Location { return loc })

	// And every day, week and month of 2024–2025 there against the reference.
	c := newChecker(t, loc, 2024, 2025)
	c.checkRange(2024, 2025, 0, true)
}

func TestPeriodAlwaysHoldsT(t *testing.T) {
	t.Parallel()
	zones := []*time.Location{nil, time.UTC, mustLoad(t, "Pacific/Kiritimati"), mustLoad(t, "America/Adak"), mustLoad(t, "Asia/Kathmandu")}
	ats := []time.Time{
		{},
		time.Unix(0, 0),
		time.Unix(-1, 999_999_999),
		time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(2037, 12, 31, 12, 0, 0, 0, time.UTC), // past 32-bit transition data: the zone's rule string
		time.Date(2100, 3, 14, 12, 0, 0, 0, time.UTC),
	}
	for _, loc := range zones {
		for _, k := range []Kind{Day, Week, Month, 0, 9} {
			for _, at := range ats {
				s, e := Period(k, loc, at)
				assert.True(t, !s.After(at) && at.Before(e), "Period(%v, %v, %v) = [%v, %v)", k, loc, at, s, e)
				ns, _ := Period(k, loc, e)
				assert.True(t, ns.Equal(e), "Period(%v, %v, %v) = %v, not the end before it %v", k, loc, e, ns, e)
			}
		}
	}
}

func TestPeriodNilZoneIsUTC(t *testing.T) {
	t.Parallel()
	at := mustTime(t, "2026-05-17T10:00:00+09:00")
	s1, e1 := Period(Week, nil, at)
	s2, e2 := Period(Week, time.UTC, at)
	assert.True(t, s1.Equal(s2) && e1.Equal(e2), "Period(Week, nil) = [%v, %v), UTC's [%v, %v)", s1, e1, s2, e2)
	assert.Equal(t, time.UTC, s1.Location())
}

func TestKindString(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "day", Day.String())
	assert.Equal(t, "week", Week.String())
	assert.Equal(t, "month", Month.String())
	assert.Equal(t, "day", Kind(0).String(), "a value other than 1–3 is a day, as Period treats it")
	assert.Equal(t, Kind(1), Day)
	assert.Equal(t, Kind(2), Week)
	assert.Equal(t, Kind(3), Month)
}

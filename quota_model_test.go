package llmrate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
)

// refPeriods is the test's own reference for calendar periods, built on
// the time package alone by brute force (independent of the limiter's
// calendar code): a period of date D starts at the first instant whose
// local date is D or later, found by scanning minutes and then seconds
// around time.Date's reading of D's midnight.
type refPeriods struct {
	starts map[string]int64 // by kind, zone and date
}

// localDay numbers t's local date in loc (days since 1970-01-01, civil).
func localDay(t time.Time, loc *time.Location) int64 {
	y, m, d := t.In(loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
}

// firstInstant is the first instant (Unix seconds) whose local date in loc
// is day or later.
func (p *refPeriods) firstInstant(loc *time.Location, day int64) int64 {
	k := fmt.Sprint(loc.String(), day)
	if s, ok := p.starts[k]; ok {
		return s
	}
	y, m, d := time.Unix(day*86400, 0).UTC().Date()
	guess := time.Date(y, m, d, 0, 0, 0, 0, loc).Unix()
	at := func(u int64) bool { return localDay(time.Unix(u, 0), loc) >= day }
	lo := guess - 4*3600
	for at(lo) { // make sure the scan starts before the date
		lo -= 4 * 3600
	}
	u := lo
	for !at(u + 60) {
		u += 60
	}
	for !at(u) {
		u++
	}
	p.starts[k] = u
	return u
}

// period is the reference [start, end) of kind (1 day, 2 ISO week, 3
// month) in loc holding t: the latest first date D with first(D) <= t.
func (p *refPeriods) period(kind int, loc *time.Location, t int64) (int64, int64) {
	firstDate := func(day int64) int64 { // the period's first date of a date
		dt := time.Unix(day*86400, 0).UTC()
		switch kind {
		case 2:
			wd := (int64(dt.Weekday()) + 6) % 7 // Monday 0
			return day - wd
		case 3:
			return time.Date(dt.Year(), dt.Month(), 1, 0, 0, 0, 0, time.UTC).Unix() / 86400
		}
		return day
	}
	next := func(first int64) int64 {
		dt := time.Unix(first*86400, 0).UTC()
		switch kind {
		case 2:
			return first + 7
		case 3:
			return time.Date(dt.Year(), dt.Month()+1, 1, 0, 0, 0, 0, time.UTC).Unix() / 86400
		}
		return first + 1
	}
	d := firstDate(localDay(time.Unix(t, 0), loc) + 1)
	for p.firstInstant(loc, d) > t {
		d = firstDate(d - 1)
	}
	return p.firstInstant(loc, d), p.firstInstant(loc, next(d))
}

// refBucket is one reference meter of a window: spent in [start, end).
type refBucket struct {
	spent, start, end int64 // nanoseconds; end 0: no period yet, or no session open
}

// TestQuotaWindowsAgainstAReference drives the memory store with random
// admissions, reconciles (in and across periods) and clock jumps across
// boundaries, for a calendar window in one of four zones and a session
// window, and checks every decision, level and reset against a reference
// model written here on the time package.
func TestQuotaWindowsAgainstAReference(t *testing.T) {
	t.Parallel()
	zones := []*time.Location{mustLoad(t, "Europe/Berlin"), mustLoad(t, "America/Santiago"), mustLoad(t, "Asia/Tokyo"), time.UTC}
	ref := &refPeriods{starts: map[string]int64{}}
	for seed := range uint64(24) {
		rng := rand.New(rand.NewPCG(seed, 43))
		zone := zones[seed%4]
		kind := int(seed/4%3) + 1
		runQuotaModel(t, rng, ref, zone, kind, seed)
	}
}

type refAdmission struct {
	at, est int64
	calAt   int64 // the calendar period's start at admission
	sessAt  int64 // the session's start at admission
}

func runQuotaModel(t *testing.T, rng *rand.Rand, ref *refPeriods, zone *time.Location, kind int, seed uint64) {
	const reqFig, tokFig, sessReq, sessTok = 6, 1_000, 4, 500
	per := time.Duration(1+rng.IntN(10)) * time.Hour
	cal := llmrate.Window{Calendar: llmrate.Calendar(kind), Zone: zone, Requests: reqFig, Tokens: tokFig}
	sess := llmrate.Window{Per: per, Session: true, Requests: sessReq, Tokens: sessTok}
	lim := llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000_000, Windows: []llmrate.Window{cal, sess}}
	s := llmrate.NewMemoryStore()
	now := time.Date(2026, time.Month(1+rng.IntN(12)), 1+rng.IntN(28), rng.IntN(24), 0, 0, 0, time.UTC).UnixNano()
	var calR, calT, sesR, sesT refBucket
	var pending []refAdmission
	calNow := func() (int64, int64) {
		s, e := ref.period(kind, zone, now/1e9)
		return s * 1e9, e * 1e9
	}
	bring := func() {
		s, e := calNow()
		for _, b := range []*refBucket{&calR, &calT} {
			if b.start != s {
				*b = refBucket{start: s, end: e}
			}
		}
		for _, b := range []*refBucket{&sesR, &sesT} {
			if b.end != 0 && now >= b.end {
				*b = refBucket{}
			}
		}
	}
	openSess := func() {
		for _, b := range []*refBucket{&sesR, &sesT} {
			if b.end == 0 {
				b.start, b.end = now, now+int64(per)
			}
		}
	}
	add := func(b *refBucket, delta, fig int64) {
		n := b.spent + delta
		if n < 0 {
			n = 0
		}
		if n > 3*fig {
			n = max(b.spent, 3*fig)
		}
		b.spent = n
	}
	req := func(tokens int64) llmrate.AdmitRequest {
		return llmrate.AdmitRequest{Key: "k", Workspace: "w", KeyLimits: lim, WorkspaceLimits: lim, Tokens: tokens, Now: time.Unix(0, now)}
	}
	for step := range 300 {
		where := fmt.Sprintf("seed %d (%s, kind %d, session %v) step %d at %v", seed, zone, kind, per, step, time.Unix(0, now).In(zone))
		switch op := rng.IntN(10); {
		case op < 5: // admit
			tokens := int64(1 + rng.IntN(400))
			if rng.IntN(20) == 0 {
				tokens = tokFig + 1 // never fits
			}
			bring()
			type need struct {
				b        *refBucket
				need, fg int64
			}
			needs := []need{{&calR, 1, reqFig}, {&calT, tokens, tokFig}, {&sesR, 1, sessReq}, {&sesT, tokens, sessTok}}
			ok, never := true, false
			var wait int64
			for _, n := range needs {
				if n.fg-n.b.spent < n.need {
					ok = false
					if n.need > n.fg {
						never = true
					} else {
						wait = max(wait, n.b.end-now)
					}
				}
			}
			d, err := s.Admit(context.Background(), req(tokens))
			if err != nil {
				t.Fatalf("%s: Admit: %v", where, err)
			}
			if d.Allowed != ok {
				t.Fatalf("%s: Admit(%d) allowed %v, reference %v (%+v)", where, tokens, d.Allowed, ok, d)
			}
			if ok {
				openSess()
				calR.spent++
				calT.spent += tokens
				sesR.spent++
				sesT.spent += tokens
				pending = append(pending, refAdmission{at: now, est: tokens, calAt: calR.start, sessAt: sesR.start})
			} else {
				if d.NeverFits != never {
					t.Fatalf("%s: NeverFits %v, reference %v", where, d.NeverFits, never)
				}
				if !never && d.RetryAfter != time.Duration(wait) {
					t.Fatalf("%s: RetryAfter %v, reference %v", where, d.RetryAfter, time.Duration(wait))
				}
			}
			want := []llmrate.WindowLevels{
				{Requests: reqFig - calR.spent, Tokens: tokFig - calT.spent, Reset: calR.end},
				{Requests: sessReq - sesR.spent, Tokens: sessTok - sesT.spent},
			}
			if sesR.end != 0 {
				want[1].Reset = sesR.end
			}
			for i, w := range want {
				got := d.KeyWindows[i]
				if got.Requests != w.Requests || got.Tokens != w.Tokens || got.Reset != w.Reset {
					t.Fatalf("%s: window %d levels %+v, reference %+v", where, i, got, w)
				}
			}
		case op < 7 && len(pending) > 0: // reconcile one admission
			i := rng.IntN(len(pending))
			a := pending[i]
			pending = append(pending[:i], pending[i+1:]...)
			actual := int64(rng.IntN(2 * tokFig))
			bring()
			for _, m := range []struct {
				b      *refBucket
				fig    int64
				inTime bool
			}{{&calT, tokFig, a.calAt == calT.start}, {&sesT, sessTok, sesT.end != 0 && a.sessAt == sesT.start}} {
				delta := min(actual, 2*m.fig) - a.est
				switch {
				case m.inTime:
					add(m.b, delta, m.fig)
				case delta > 0:
					if m.b == &sesT {
						openSess()
					}
					add(m.b, delta, m.fig)
				}
			}
			err := s.Reconcile(context.Background(), llmrate.ReconcileRequest{Key: "k", Workspace: "w", KeyLimits: lim, WorkspaceLimits: lim,
				Estimate: a.est, Actual: actual, Now: time.Unix(0, now), Admitted: time.Unix(0, a.at)})
			if err != nil {
				t.Fatalf("%s: Reconcile: %v", where, err)
			}
		default: // the clock moves: a little, or across a boundary
			switch rng.IntN(4) {
			case 0:
				now += int64(rng.IntN(3600)) * 1e9
			case 1:
				_, e := calNow()
				now = e - int64(rng.IntN(3))*1e9 // just before, or at, the period's end
			case 2:
				bring()
				if sesR.end != 0 {
					now = sesR.end - int64(rng.IntN(2))*1e9
				} else {
					now += int64(time.Minute)
				}
			default:
				now += int64(rng.IntN(40*24)) * int64(time.Hour) / 4
			}
		}
	}
}

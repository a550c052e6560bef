package llmratetest

import (
	"context"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
)

// quota is a store under test for the quota subtests (a QuotaStore),
// called directly.
type quota struct {
	*direct
}

func (q *quota) admit(r llmrate.AdmitRequest) llmrate.Decision {
	q.t.Helper()
	r.Now = q.clock.Now()
	if r.ID == "" {
		r.ID = llmrate.NewAdmissionID()
	}
	d, err := q.s.Admit(context.Background(), r)
	if err != nil {
		q.t.Fatalf("Admit: %v", err)
	}
	return d
}

func (q *quota) reconcile(r llmrate.ReconcileRequest) {
	q.t.Helper()
	r.Now = q.clock.Now()
	if r.ID == "" {
		r.ID = llmrate.NewAdmissionID()
	}
	if err := q.s.Reconcile(context.Background(), r); err != nil {
		q.t.Fatalf("Reconcile: %v", err)
	}
}

// setClock moves the store's clock to t.
func (q *quota) setClock(t time.Time) { q.clock.Advance(t.Sub(q.clock.Now())) }

func loadZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("zone %s not in this system's tzdata (embed time/tzdata): %v", name, err)
	}
	return loc
}

// sameInstant checks an instant (any zone).
func sameInstant(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
}

// runQuotas checks the store contract of plans and quotas (QuotaStore),
// skipped for a store that is not one: Unlimited per-minute figures, a
// calendar window resetting at its period's start in a zone, a session
// window, the plan's windows and gauge lent to a model entry's request,
// and the late reconcile's rules.
func runQuotas(t *testing.T, f factory) {
	probe := newDirect(t, f)
	if _, ok := probe.s.(llmrate.QuotaStore); !ok {
		t.Skipf("%T is not an llmrate.QuotaStore", probe.s)
	}
	big := func(ws ...llmrate.Window) llmrate.Limits {
		return llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000_000, Windows: ws}
	}
	t.Run("Unlimited", func(t *testing.T) {
		q := &quota{newDirect(t, f)}
		lim := llmrate.Limits{RequestsPerMinute: 2, TokensPerMinute: llmrate.Unlimited}
		r := llmrate.AdmitRequest{Key: "sk-u", Workspace: "ws-u", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1_000_000_000}
		for i := range 4 {
			d := q.admit(r)
			mustEqual(t, true, d.Allowed, "request %d of the burst of 4: no tokens bucket to exceed", i+1)
			equal(t, int64(0), d.Remaining[llmrate.KeyTokens], "an Unlimited bucket's Remaining")
			equal(t, int64(3-i), d.Remaining[llmrate.KeyRequests], "the requests bucket")
		}
		d := q.admit(r)
		mustEqual(t, false, d.Allowed, "the 5th request")
		equal(t, llmrate.KeyRequests, d.Refused, "refused by the requests bucket")
		equal(t, false, d.NeverFits, "10^9 tokens fit: there is no tokens bucket")
		retryWithin(t, d, 30*time.Second, "the requests bucket's wait alone")
		q.reconcile(llmrate.ReconcileRequest{Key: "sk-u", Workspace: "ws-u", KeyLimits: lim, WorkspaceLimits: lim, Estimate: 1, Actual: 5_000_000_000})
	})
	t.Run("CalendarDayInAZone", func(t *testing.T) {
		tokyo := loadZone(t, "Asia/Tokyo")
		q := &quota{newDirect(t, f)}
		lim := big(llmrate.Window{Calendar: llmrate.CalendarDay, Zone: tokyo, Requests: 2})
		q.setClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)) // 21:00 JST
		r := llmrate.AdmitRequest{Key: "sk-day", Workspace: "ws-day", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1}
		for i := range 2 {
			mustEqual(t, true, q.admit(r).Allowed, "request %d of the day's 2", i+1)
		}
		d := q.admit(r)
		mustEqual(t, false, d.Allowed, "the day's 3rd")
		equal(t, llmrate.KeyRequests, d.Refused, "the key's day")
		equal(t, llmrate.CalendarDay, d.Calendar, "Decision.Calendar")
		equal(t, "Asia/Tokyo", d.Zone, "Decision.Zone")
		equal(t, time.Duration(0), d.Window, "a calendar window's Per")
		retryWithin(t, d, 3*time.Hour, "to 00:00 JST, not capped at a minute")
		if len(d.KeyWindows) == 1 {
			equal(t, int64(0), d.KeyWindows[0].Requests, "the day's level")
			sameInstant(t, time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC), d.KeyWindows[0].ResetAt(), "WindowLevels.Reset: the period's end")
		} else {
			t.Errorf("KeyWindows %v, want one window's levels", d.KeyWindows)
		}
		q.setClock(time.Date(2026, 11, 29, 14, 59, 59, 0, time.UTC))
		equal(t, false, q.admit(r).Allowed, "a second before 00:00 JST: nothing refills within a period")
		q.setClock(time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC))
		d = q.admit(r)
		mustEqual(t, true, d.Allowed, "full again at 00:00 JST")
		if len(d.KeyWindows) == 1 {
			equal(t, int64(1), d.KeyWindows[0].Requests, "the new day's 2, less this one")
		}
	})
	t.Run("Session", func(t *testing.T) {
		q := &quota{newDirect(t, f)}
		lim := big(llmrate.Window{Per: time.Hour, Session: true, Requests: 1}, llmrate.Window{Per: time.Minute, Tokens: 10})
		r := llmrate.AdmitRequest{Key: "sk-s", Workspace: "ws-s", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 11}
		d := q.admit(r)
		mustEqual(t, false, d.Allowed, "11 tokens never fit the minute's 10")
		q.clock.Advance(10 * time.Minute)
		opened := q.clock.Now()
		r.Tokens = 1
		d = q.admit(r)
		mustEqual(t, true, d.Allowed, "the session's one request: the refusal opened none")
		if len(d.KeyWindows) == 2 {
			sameInstant(t, opened.Add(time.Hour), d.KeyWindows[0].ResetAt(), "the session ends Per after its first admission")
		} else {
			t.Errorf("KeyWindows %v, want two windows' levels", d.KeyWindows)
		}
		q.clock.Advance(20 * time.Minute)
		d = q.admit(r)
		mustEqual(t, false, d.Allowed, "nothing refills within a session")
		equal(t, true, d.Session, "Decision.Session")
		equal(t, time.Hour, d.Window, "the session's Per")
		retryWithin(t, d, 40*time.Minute, "to the session's end")
		q.clock.Advance(40 * time.Minute)
		equal(t, true, q.admit(r).Allowed, "full again Per after it opened")
	})
	t.Run("LentWindowsAndGauges", func(t *testing.T) {
		for _, solo := range []bool{false, true} {
			q := &quota{newDirect(t, f)}
			plan := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000_000, ConcurrentRequests: 1,
				Windows: []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Tokens: 100}}}
			entry := big()
			ws := "ws-lent"
			if solo {
				ws = "sk-lent"
			}
			r := lentRequest("sk-lent", ws, "gpt-*", entry, plan, solo)
			r.Tokens, r.ID = 60, "first"
			d := q.admit(r)
			mustEqual(t, true, d.Allowed, "solo %v: the entry's request", solo)
			var levels []llmrate.WindowLevels
			if d.Plan != nil {
				levels = d.Plan.KeyWindows
				if solo {
					levels = d.Plan.WorkspaceWindows
				}
			}
			if len(levels) == 1 {
				equal(t, int64(40), levels[0].Tokens, "solo %v: the plan's month, lent", solo)
			} else {
				t.Errorf("solo %v: plan windows %v, want one window's levels", solo, levels)
			}
			other := lentRequest("sk-lent", ws, "claude-*", entry, plan, solo)
			other.Tokens = 50
			d = q.admit(other)
			mustEqual(t, false, d.Allowed, "solo %v: another entry's request finds the plan's month spent", solo)
			equal(t, true, d.Lent, "solo %v: Decision.Lent", solo)
			equal(t, llmrate.CalendarMonth, d.Calendar, "solo %v: the plan's month refused", solo)
			retryWithin(t, d, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Sub(q.clock.Now()), "to the 1st")
			other.Tokens = 10
			d = q.admit(other)
			mustEqual(t, false, d.Allowed, "solo %v: the plan's gauge holds the first entry's slot", solo)
			equal(t, true, d.Refused.Concurrent(), "solo %v: refused by a gauge", solo)
			equal(t, true, d.Lent, "solo %v: the plan's gauge", solo)
			def := llmrate.AdmitRequest{Key: "sk-lent", Workspace: ws, KeyLimits: plan, WorkspaceLimits: plan, Tokens: 10, Solo: solo}
			equal(t, false, q.admit(def).Allowed, "solo %v: a request on no entry finds the same slot taken", solo)
			rr := llmrate.ReconcileRequest{Key: "sk-lent", Workspace: ws, Model: "gpt-*", KeyLimits: entry, WorkspaceLimits: entry,
				Estimate: 60, Actual: 70, Solo: solo, ID: "first"}
			setLent(&rr, plan)
			q.reconcile(rr)
			d = q.admit(def)
			mustEqual(t, true, d.Allowed, "solo %v: the reconcile released the plan's slot", solo)
			levels = d.KeyWindows
			if solo {
				levels = d.WorkspaceWindows
			}
			if len(levels) == 1 {
				equal(t, int64(20), levels[0].Tokens, "solo %v: 100 − 70 charged on the entry − 10: one month for every model", solo)
			}
		}
	})
	t.Run("LateReconcile", func(t *testing.T) {
		lim := big(llmrate.Window{Calendar: llmrate.CalendarDay, Zone: time.UTC, Tokens: 100})
		for _, c := range []struct {
			name         string
			actual, want int64
		}{{"a debit still owed lands in the new period", 50, 79}, {"a credit is dropped", 10, 99}} {
			q := &quota{newDirect(t, f)}
			q.setClock(time.Date(2026, 11, 29, 23, 59, 59, 0, time.UTC))
			r := llmrate.AdmitRequest{Key: "sk-late", Workspace: "ws-late", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 30}
			admitted := q.clock.Now()
			mustEqual(t, true, q.admit(r).Allowed, "%s: the admission", c.name)
			q.clock.Advance(2 * time.Second)
			q.reconcile(llmrate.ReconcileRequest{Key: "sk-late", Workspace: "ws-late", KeyLimits: lim, WorkspaceLimits: lim,
				Estimate: 30, Actual: c.actual, Admitted: admitted})
			r.Tokens = 1
			d := q.admit(r)
			mustEqual(t, true, d.Allowed, "%s: the next day's first", c.name)
			if len(d.KeyWindows) == 1 {
				equal(t, c.want, d.KeyWindows[0].Tokens, c.name)
			}
		}
	})
}

// lentRequest is an admission on model entry model with the plan's figures
// lent (AdmitRequest.KeyPlan, WorkspacePlan: both point to plan, which
// the store must not change).
func lentRequest(key, ws, model string, entry, plan llmrate.Limits, solo bool) llmrate.AdmitRequest {
	r := llmrate.AdmitRequest{Key: key, Workspace: ws, Model: model, KeyLimits: entry, WorkspaceLimits: entry, Solo: solo}
	r.KeyPlan, r.WorkspacePlan = &plan, &plan
	return r
}

// setLent sets a reconcile's lent figures.
func setLent(r *llmrate.ReconcileRequest, plan llmrate.Limits) {
	r.KeyPlan, r.WorkspacePlan = &plan, &plan
}

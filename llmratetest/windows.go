package llmratetest

import (
	"context"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
)

// win is a store under test for the windows' subtests, called directly.
type win struct {
	*direct
	key, ws string
	kl, wl  llmrate.Limits
	solo    bool
}

// bigMinute: per-minute figures that never bind, so that only the windows
// do.
func bigMinute(ws ...llmrate.Window) llmrate.Limits {
	return llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000_000, Windows: ws}
}

func (w *win) admitIn(key string, tokens, input int64) llmrate.Decision {
	w.t.Helper()
	d, err := w.s.Admit(context.Background(), llmrate.AdmitRequest{Key: key, Workspace: w.ws, KeyLimits: w.kl, WorkspaceLimits: w.wl,
		Tokens: tokens, InputTokens: input, Solo: w.solo, Now: w.clock.Now(), ID: llmrate.NewAdmissionID()})
	if err != nil {
		w.t.Fatalf("Admit: %v", err)
	}
	return d
}

func (w *win) admit(tokens, input int64) llmrate.Decision { return w.admitIn(w.key, tokens, input) }

func (w *win) reconcile(d llmrate.Decision, r llmrate.ReconcileRequest) {
	w.t.Helper()
	r.Key, r.Workspace, r.KeyLimits, r.WorkspaceLimits, r.Solo, r.Now, r.ID, r.Receipt = w.key, w.ws, w.kl, w.wl, w.solo, w.clock.Now(), llmrate.NewAdmissionID(), d.Receipt
	if err := w.s.Reconcile(context.Background(), r); err != nil {
		w.t.Fatalf("Reconcile: %v", err)
	}
}

// retryWithin checks a refusal's RetryAfter: exact, or rounded up to whole
// seconds (which the Store contract allows).
func retryWithin(t *testing.T, d llmrate.Decision, exact time.Duration, what string) {
	t.Helper()
	up := (exact + time.Second - 1) / time.Second * time.Second
	if d.RetryAfter != exact && d.RetryAfter != up {
		t.Errorf("%s: RetryAfter %v, want %v (or %v rounded up)", what, d.RetryAfter, exact, up)
	}
}

// runWindows checks Limits.Windows through the Store interface: a window
// bucket holds its figure and refills it per Per, exactly; a refusal names
// the window and tells the wait past a minute; the input and output
// meters; all or nothing with the per-minute buckets; the workspace's
// windows shared by its keys; identity by Per and clamping by figure; a
// reconcile carrying figures changed since its admission, which refills
// no window at them; refunds.
func runWindows(t *testing.T, f factory) {
	t.Run("DailyQuota", func(t *testing.T) {
		for _, solo := range []bool{true, false} {
			lim := bigMinute(llmrate.Window{Per: 24 * time.Hour, Requests: 1500})
			w := &win{direct: newDirect(t, f), key: "sk-day", ws: "sk-day", kl: lim, wl: lim, solo: solo}
			for i := range 1500 {
				if d := w.admit(1, 0); !d.Allowed {
					t.Fatalf("solo %v: request %d of 1,500 refused: %+v", solo, i+1, d)
				}
			}
			d := w.admit(1, 0)
			mustEqual(t, false, d.Allowed, "solo %v: the 1,501st", solo)
			equal(t, llmrate.KeyRequests, d.Refused, "solo %v: refusing bucket", solo)
			equal(t, 24*time.Hour, d.Window, "solo %v: Decision.Window", solo)
			retryWithin(t, d, 57600*time.Millisecond, "one request back every 57.6 s")
			if len(d.KeyWindows) == 1 {
				equal(t, int64(0), d.KeyWindows[0].Requests, "solo %v: the window's level", solo)
			} else {
				t.Errorf("solo %v: KeyWindows %v, want one window's levels", solo, d.KeyWindows)
			}
			w.clock.Advance(57600*time.Millisecond - time.Microsecond)
			equal(t, false, w.admit(1, 0).Allowed, "solo %v: a microsecond short", solo)
			w.clock.Advance(time.Microsecond)
			equal(t, true, w.admit(1, 0).Allowed, "solo %v: at 57.6 s", solo)
			equal(t, false, w.admit(1, 0).Allowed, "solo %v: one back, one spent", solo)
			w.clock.Advance(48 * time.Hour)
			d = w.admit(1, 0)
			if len(d.KeyWindows) == 1 {
				equal(t, int64(1499), d.KeyWindows[0].Requests, "solo %v: idle two days: full at 1,500 (no burst), less this one", solo)
			}
		}
	})
	t.Run("LongWait", func(t *testing.T) {
		lim := bigMinute(llmrate.Window{Per: 24 * time.Hour, Requests: 2})
		w := &win{direct: newDirect(t, f), key: "sk-long", ws: "ws-long", kl: lim, wl: lim}
		w.admit(1, 0)
		w.admit(1, 0)
		d := w.admit(1, 0)
		mustEqual(t, false, d.Allowed, "the third of 2 per day")
		retryWithin(t, d, 12*time.Hour, "Retry-After past 60 s: a window's wait, up to its Per")
	})
	t.Run("Meters", func(t *testing.T) {
		// Anthropic's shape: 1,000 input and 100 output tokens per minute.
		lim := bigMinute(llmrate.Window{Per: time.Minute, InputTokens: 1000, OutputTokens: 100})
		w := &win{direct: newDirect(t, f), key: "sk-io", ws: "sk-io", kl: lim, wl: lim, solo: true}
		d := w.admit(5000, 300)
		mustEqual(t, true, d.Allowed, "input debited 300 of 1,000; the tokens estimate is not the input meter's")
		if len(d.KeyWindows) != 1 {
			t.Fatalf("KeyWindows %v, want one window's levels", d.KeyWindows)
		}
		equal(t, llmrate.WindowLevels{InputTokens: 700, OutputTokens: 100}, d.KeyWindows[0], "output debited nothing at admission")
		w.reconcile(d, llmrate.ReconcileRequest{Estimate: 5000, Actual: 400, InputEstimate: 300, InputActual: 200, OutputActual: 150})
		d = w.admit(1, 800)
		mustEqual(t, false, d.Allowed, "input at 800 but output at -50")
		equal(t, llmrate.KeyOutputTokens, d.Refused, "the output meter")
		equal(t, time.Minute, d.Window, "its window")
		retryWithin(t, d, 30600*time.Millisecond, "from -50 to 1 at 100 per minute")
		equal(t, llmrate.WindowLevels{InputTokens: 800, OutputTokens: -50}, d.KeyWindows[0], "a refusal debits nothing")
		d = w.admit(1, 1001)
		equal(t, true, d.NeverFits, "an input estimate above the input figure never fits")
		w.clock.Advance(30600 * time.Millisecond)
		d = w.admit(1, 1000)
		mustEqual(t, true, d.Allowed, "input full again (capped at 1,000), output at 1")
		equal(t, llmrate.WindowLevels{InputTokens: 0, OutputTokens: 1}, d.KeyWindows[0], "levels")
		w.reconcile(d, llmrate.ReconcileRequest{Estimate: 1, Actual: 1, InputEstimate: 1000, InputActual: 1 << 40, OutputActual: 1 << 40})
		d = w.admit(1, 0)
		equal(t, llmrate.WindowLevels{InputTokens: -1000, OutputTokens: -199}, d.KeyWindows[0], "each charge bounded at twice its bucket's capacity")
	})
	t.Run("AllOrNothing", func(t *testing.T) {
		kl := bigMinute(llmrate.Window{Per: time.Hour, Requests: 5, Tokens: 1000})
		wl := bigMinute(llmrate.Window{Per: time.Hour, Requests: 3})
		w := &win{direct: newDirect(t, f), key: "k1", ws: "ws-shared", kl: kl, wl: wl}
		mustEqual(t, true, w.admit(600, 0).Allowed, "first")
		d := w.admit(600, 0)
		mustEqual(t, false, d.Allowed, "1,200 tokens of 1,000 per hour")
		equal(t, llmrate.KeyTokens, d.Refused, "the key window's tokens meter")
		equal(t, time.Hour, d.Window, "Decision.Window")
		w.admitIn("k2", 1, 0)
		w.admitIn("k3", 1, 0)
		d = w.admitIn("k4", 1, 0)
		mustEqual(t, false, d.Allowed, "the workspace's 3 per hour, shared by its keys")
		equal(t, llmrate.WorkspaceRequests, d.Refused, "the workspace window's requests meter")
		w.clock.Advance(20 * time.Minute) // one workspace request back
		d = w.admitIn("k4", 1, 0)
		mustEqual(t, true, d.Allowed, "one back after 20 minutes")
		if len(d.KeyWindows) == 1 {
			equal(t, int64(4), d.KeyWindows[0].Requests, "k4's own window debited once: the refusal took nothing")
		}
	})
	t.Run("IdentityByPer", func(t *testing.T) {
		lim := bigMinute(llmrate.Window{Per: time.Hour, Requests: 10})
		w := &win{direct: newDirect(t, f), key: "sk-id", ws: "sk-id", kl: lim, wl: lim, solo: true}
		for range 8 {
			w.admit(1, 0)
		}
		w.kl = bigMinute(llmrate.Window{Per: time.Hour, Requests: 20})
		w.wl = w.kl
		d := w.admit(1, 0)
		if len(d.KeyWindows) == 1 {
			equal(t, int64(1), d.KeyWindows[0].Requests, "a raised figure: no free refill")
		}
		w.kl = bigMinute(llmrate.Window{Per: 2 * time.Hour, Requests: 20})
		w.wl = w.kl
		d = w.admit(1, 0)
		if len(d.KeyWindows) == 1 {
			equal(t, int64(19), d.KeyWindows[0].Requests, "a changed Per is another bucket, full")
		}
		w.kl = bigMinute(llmrate.Window{Per: 2 * time.Hour, Requests: 5})
		w.wl = w.kl
		d = w.admit(1, 0)
		if len(d.KeyWindows) == 1 {
			equal(t, int64(4), d.KeyWindows[0].Requests, "a lowered figure clamps the level")
		}
	})
	t.Run("FigureChangedInFlight", func(t *testing.T) {
		// A store keeps levels, not figures: a reconcile carries its
		// admission's figures, maybe changed since, and must not refill
		// or clamp a window at them. Solo: one scope.
		stale := func(w *win, lim llmrate.Limits, r llmrate.ReconcileRequest) {
			t.Helper()
			r.Key, r.Workspace, r.KeyLimits, r.WorkspaceLimits, r.Solo, r.Now, r.ID = w.key, w.ws, lim, lim, true, w.clock.Now(), llmrate.NewAdmissionID()
			if err := w.s.Reconcile(context.Background(), r); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
		}
		// 100 requests an hour, spent; the figure raised to 1,000; the old
		// request's reconcile (nothing to charge a requests meter) lands
		// 30 min later: the next request refills the 30 min at 1,000 an
		// hour, 500, as if no reconcile had landed, and leaves 499.
		old := bigMinute(llmrate.Window{Per: time.Hour, Requests: 100})
		w := &win{direct: newDirect(t, f), key: "sk-fig", ws: "sk-fig", kl: old, wl: old, solo: true}
		for i := range 100 {
			mustEqual(t, true, w.admit(1, 0).Allowed, "request %d of 100", i+1)
		}
		w.kl = bigMinute(llmrate.Window{Per: time.Hour, Requests: 1000})
		w.wl = w.kl
		w.clock.Advance(30 * time.Minute)
		stale(w, old, llmrate.ReconcileRequest{Estimate: 1, Actual: 1})
		d := w.admit(1, 0)
		mustEqual(t, true, d.Allowed, "500 back")
		if len(d.KeyWindows) == 1 {
			equal(t, int64(499), d.KeyWindows[0].Requests, "refilled at 1,000 an hour, not at the reconcile's 100")
		}
		// 1,000 tokens an hour, spent by A; raised to 10,000, a request of
		// 1 at +10 min refills 1,666⅔ (1,665⅔ left); A's reconcile at
		// +30 min (actual 1,200: 200 more) carries the old 1,000: it
		// refills the 20 min at 10,000 an hour (3,333⅓: 4,999), clamps
		// nothing to 1,000, and takes 200 (4,799); the next 1 leaves 4,798.
		old = bigMinute(llmrate.Window{Per: time.Hour, Tokens: 1000})
		w = &win{direct: newDirect(t, f), key: "sk-fig2", ws: "sk-fig2", kl: old, wl: old, solo: true}
		mustEqual(t, true, w.admit(1000, 0).Allowed, "A: the whole window")
		w.kl = bigMinute(llmrate.Window{Per: time.Hour, Tokens: 10_000})
		w.wl = w.kl
		w.clock.Advance(10 * time.Minute)
		d = w.admit(1, 0)
		mustEqual(t, true, d.Allowed, "at the raised figure")
		if len(d.KeyWindows) == 1 {
			equal(t, int64(1665), d.KeyWindows[0].Tokens, "10 min at 10,000 an hour, less 1")
		}
		w.clock.Advance(20 * time.Minute)
		stale(w, old, llmrate.ReconcileRequest{Estimate: 1000, Actual: 1200})
		d = w.admit(1, 0)
		mustEqual(t, true, d.Allowed, "after the reconcile")
		if len(d.KeyWindows) == 1 {
			equal(t, int64(4798), d.KeyWindows[0].Tokens, "refilled at 10,000 an hour, not clamped to the reconcile's 1,000, less 200 and 1")
		}
	})
	t.Run("Refund", func(t *testing.T) {
		lim := bigMinute(llmrate.Window{Per: time.Hour, Requests: 10, Tokens: 1000, InputTokens: 500, OutputTokens: 50})
		w := &win{direct: newDirect(t, f), key: "sk-ref", ws: "ws-ref", kl: lim, wl: lim}
		d := w.admit(300, 200)
		mustEqual(t, true, d.Allowed, "admitted")
		w.reconcile(d, llmrate.ReconcileRequest{Estimate: 300, InputEstimate: 200, Actual: 999, InputActual: 999, OutputActual: 999, Refund: true})
		d = w.admit(1, 1)
		want := llmrate.WindowLevels{Requests: 9, Tokens: 999, InputTokens: 499, OutputTokens: 50}
		if len(d.KeyWindows) == 1 && len(d.WorkspaceWindows) == 1 {
			equal(t, want, d.KeyWindows[0], "the key's windows refunded in full")
			equal(t, want, d.WorkspaceWindows[0], "the workspace's windows refunded in full")
		} else {
			t.Errorf("windows' levels %v %v, want one window each", d.KeyWindows, d.WorkspaceWindows)
		}
	})
}

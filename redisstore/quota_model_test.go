package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// sameDecision is d with what the two stores may say differently set
// aside: the receipt (the Redis store's own note: the server's instant of
// the admission), the instants' zones (compared as instants), and waits below the Redis store's precision
// (whole µs, rounded up).
func sameDecision(d llmrate.Decision) llmrate.Decision {
	d.Receipt = ""
	if !d.Allowed && d.Window == 0 && d.Calendar == 0 && !d.Refused.Concurrent() {
		d.Window = time.Minute // a per-minute bucket's refusal: 0 or a minute (llmrate.Decision.Window)
	}
	up := func(w time.Duration) time.Duration { return (w + time.Microsecond - 1).Truncate(time.Microsecond) }
	d.RetryAfter, d.Wait = up(d.RetryAfter), up(d.Wait)
	d.KeyWindows, d.WorkspaceWindows = normalize(d.KeyWindows), normalize(d.WorkspaceWindows)
	var pk, pw []llmrate.WindowLevels
	if d.Plan != nil {
		pk, pw = normalize(d.Plan.KeyWindows), normalize(d.Plan.WorkspaceWindows)
	}
	for _, p := range []*[]llmrate.WindowLevels{&d.KeyWindows, &d.WorkspaceWindows, &pk, &pw} {
		if len(*p) == 0 {
			*p = nil
		}
	}
	d.Plan = nil
	if pk != nil || pw != nil {
		d.Plan = &llmrate.PlanLevels{KeyWindows: pk, WorkspaceWindows: pw}
	}
	return d
}

// sessionResets sets aside the Reset of session windows: a window's
// meters keep sessions of their own, which may open apart (seed 130 of
// LLMRATE_QUOTA_SEEDS=300 has two 3 s apart), and the stores name a
// window's Reset differently then (the memory store its last meter's,
// zero when that one is not open; the Redis store the latest end of those
// open). Levels are compared whole; session resets are pinned in
// quota_test.go.
func sessionResets(r llmrate.AdmitRequest, ds ...*llmrate.Decision) {
	for _, d := range ds {
		for _, p := range []struct {
			ws []llmrate.Window
			ls []llmrate.WindowLevels
		}{{r.KeyLimits.Windows, d.KeyWindows}, {r.WorkspaceLimits.Windows, d.WorkspaceWindows},
			{windowsOf(r.KeyPlan), planWindows(d, 0)}, {windowsOf(r.WorkspacePlan), planWindows(d, 1)}} {
			for i := range p.ls {
				if i < len(p.ws) && p.ws[i].Session {
					p.ls[i].Reset = 0
				}
			}
		}
	}
}

// planWindows returns d's lent windows' levels, the key's (0) or the
// workspace's (1).
func planWindows(d *llmrate.Decision, scope int) []llmrate.WindowLevels {
	if d.Plan == nil {
		return nil
	}
	return [2][]llmrate.WindowLevels{d.Plan.KeyWindows, d.Plan.WorkspaceWindows}[scope]
}

func windowsOf(p *llmrate.Limits) []llmrate.Window {
	if p == nil {
		return nil
	}
	return p.Windows
}

// quotaOrWindows reports whether r has windows, a gauge, a wait, a plan
// lent or an Unlimited figure: the Redis store's scripts that tell waits
// in µs (admit.lua tells whole seconds).
func quotaOrWindows(r llmrate.AdmitRequest) bool {
	return r.MaxWait > 0 || r.KeyLimits.ConcurrentRequests+r.WorkspaceLimits.ConcurrentRequests > 0 || len(r.KeyLimits.Windows)+len(r.WorkspaceLimits.Windows)+len(windowsOf(r.KeyPlan))+len(windowsOf(r.WorkspacePlan)) > 0 ||
		r.KeyPlan != nil && r.KeyPlan.ConcurrentRequests > 0 || r.WorkspacePlan != nil && r.WorkspacePlan.ConcurrentRequests > 0 ||
		r.KeyLimits.RequestsPerMinute == llmrate.Unlimited || r.KeyLimits.TokensPerMinute == llmrate.Unlimited ||
		r.WorkspaceLimits.RequestsPerMinute == llmrate.Unlimited || r.WorkspaceLimits.TokensPerMinute == llmrate.Unlimited
}

// TestQuotasMatchMemoryStore: random admissions, reservations, reconciles
// (late ones too) and refunds under Unlimited figures, calendar windows
// in several zones (DST days included), session windows, rolling windows
// beside them, and a plan's windows and gauges lent to a model entry's
// requests, with clock steps from microseconds to weeks (backwards too)
// and figure changes, decided by Redis (WithClock) exactly as by the
// memory store (AdmitRequest.Now): every Decision field.
func TestQuotasMatchMemoryStore(t *testing.T) {
	if _, ok := any(llmrate.NewMemoryStore()).(llmrate.Peeker); !ok {
		t.Skip("the memory store keeps no quotas yet (it is no Peeker): nothing to compare with")
	}
	srv := redistest.Start(t)
	c := redisrig.NewClient(t, &redis.Options{Addr: srv.Addr, PoolSize: 1, MaxRetries: -1}) // no hedges (TestWindowsMatchReference)
	var now time.Time
	rs := redisrig.Store(t, c, redisstore.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	zones := []*time.Location{time.UTC, zone(t, "Europe/Berlin"), zone(t, "Asia/Tokyo"), zone(t, "America/Santiago")}
	pers := []time.Duration{time.Minute, time.Hour, 5 * time.Hour, 24 * time.Hour}
	steps, refused, quotaRefusals, lentRefusals, allowed := 0, 0, 0, 0, 0
	seeds := uint64(80)
	if n, err := strconv.ParseUint(os.Getenv("LLMRATE_QUOTA_SEEDS"), 10, 64); err == nil {
		seeds = n // more, by hand
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		// LLMRATE_QUOTA_SEED=n runs seed n alone and logs its steps.
		if s := os.Getenv("LLMRATE_QUOTA_SEED"); s != "" && s != fmt.Sprint(seed) {
			continue
		}
		rng := rand.New(rand.NewPCG(seed, 21))
		mem := any(llmrate.NewMemoryStore()).(interface {
			llmrate.Store
			llmrate.Peeker
		})
		now = time.Date(2026, time.March, 28, 20, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(10*86_400_000_000)) * time.Microsecond)
		fig := func(scale int64) int64 {
			switch rng.IntN(5) {
			case 0, 1:
				return 0
			case 2:
				return 1 + rng.Int64N(scale)
			}
			return scale + rng.Int64N(10*scale)
		}
		window := func(rpm, tpm int64) llmrate.Window {
			var w llmrate.Window
			switch rng.IntN(3) {
			case 0:
				w = llmrate.Window{Per: pers[rng.IntN(len(pers))]}
			case 1:
				w = llmrate.Window{Calendar: llmrate.Calendar(1 + rng.IntN(3)), Zone: zones[rng.IntN(len(zones))]}
			default:
				w = llmrate.Window{Per: pers[rng.IntN(len(pers))], Session: true}
			}
			w.Requests, w.Tokens, w.InputTokens, w.OutputTokens = fig(rpm), fig(tpm), fig(tpm), fig(tpm)
			if w.Requests+w.Tokens+w.InputTokens+w.OutputTokens == 0 {
				w.Requests = 1 + rng.Int64N(5)
			}
			return w
		}
		windows := func(rpm, tpm int64) []llmrate.Window {
			var ws []llmrate.Window
			for range rng.IntN(3) {
				w := window(rpm, tpm)
				dup := false
				for _, v := range ws {
					dup = dup || v.Per == w.Per && v.Calendar == w.Calendar && v.Session == w.Session && v.Zone.String() == w.Zone.String()
				}
				if !dup {
					ws = append(ws, w)
				}
			}
			return ws
		}
		perMinute := func(max int64) int64 {
			if rng.IntN(4) == 0 {
				return llmrate.Unlimited
			}
			return 1 + rng.Int64N(max)
		}
		limits := func() llmrate.Limits {
			l := llmrate.Limits{RequestsPerMinute: perMinute(20), TokensPerMinute: perMinute(5000)}
			l.Windows = windows(20, 5000)
			if rng.IntN(5) == 0 {
				l.ConcurrentRequests = 1 + rng.Int64N(3)
			}
			return l
		}
		solo := rng.IntN(3) == 0
		key, ws := fmt.Sprintf("sk-%d", seed), fmt.Sprintf("ws-%d", seed)
		if solo {
			ws = key
		}
		// As the limiter sends them: a request without an entry is held to
		// the plan's figures (kl, wl); one on an entry to the entry's
		// (per-minute figures and windows of its own) and to the plan's
		// windows and gauges (KeyPlan, WorkspacePlan).
		kl := limits()
		wl := kl
		if !solo {
			wl = limits()
		}
		entries := map[string][2]llmrate.Limits{}
		for _, m := range []string{"gpt-4o*", "claude-*"} {
			ek := limits()
			ew := ek
			if !solo {
				ew = limits()
			}
			entries[m] = [2]llmrate.Limits{ek, ew}
		}
		type pendingRec struct {
			rec llmrate.ReconcileRequest
		}
		var pending []pendingRec
		for step := range 40 {
			steps++
			switch x := rng.IntN(14); {
			case x < 5:
				now = now.Add(time.Duration(rng.Int64N(90_000_000)) * time.Microsecond)
			case x == 5:
				now = now.Add(time.Duration(rng.Int64N(3*86_400_000_000)) * time.Microsecond)
			case x == 6:
				now = now.Add(time.Duration(rng.Int64N(6*3_600_000_000)) * time.Microsecond)
			case x == 7:
				now = now.Add(time.Duration(rng.Int64N(20*86_400_000_000)) * time.Microsecond)
			case x == 8: // the clock steps back
				now = now.Add(-time.Duration(rng.Int64N(5_000_000)) * time.Microsecond)
			case x == 9: // new figures, the same windows: a calendar or session keeps what was spent
				for i := range kl.Windows {
					if kl.Windows[i].Tokens != 0 {
						kl.Windows[i].Tokens = 1 + rng.Int64N(20_000)
					}
					if kl.Windows[i].Requests != 0 {
						kl.Windows[i].Requests = 1 + rng.Int64N(10)
					}
				}
				if solo {
					wl = kl
				}
			}
			model := []string{"", "gpt-4o*", "claude-*"}[rng.IntN(3)]
			req := llmrate.AdmitRequest{Key: key, Workspace: ws, Model: model, KeyLimits: kl, WorkspaceLimits: wl,
				Tokens: 1 + rng.Int64N(3000), InputTokens: rng.Int64N(3000), Solo: solo, ID: llmrate.NewAdmissionID(), Now: now}
			if model != "" {
				req.KeyLimits, req.WorkspaceLimits = entries[model][0], entries[model][1]
				kp, wp := kl, wl
				req.KeyPlan, req.WorkspacePlan = &kp, &wp
			}
			if rng.IntN(3) == 0 {
				req.MaxWait = time.Duration(rng.Int64N(30_000_000)) * time.Microsecond
			}
			want, err := mem.Admit(ctx, req)
			require.NoError(t, err)
			got, err := rs.Admit(ctx, req)
			require.NoError(t, err)
			if !quotaOrWindows(req) { // the plain scripts' Retry-After: whole seconds, rounded up
				want.RetryAfter = (want.RetryAfter + time.Second - 1).Truncate(time.Second)
			}
			sessionResets(req, &want, &got)
			require.Equal(t, sameDecision(want), sameDecision(got), "seed %d step %d: %+v", seed, step, req)
			pw, err := mem.Peek(ctx, req)
			require.NoError(t, err)
			pg, err := rs.Peek(ctx, req)
			require.NoError(t, err)
			sessionResets(req, &pw, &pg)
			require.Equal(t, sameDecision(pw), sameDecision(pg), "Peek: seed %d step %d", seed, step)
			if os.Getenv("LLMRATE_QUOTA_SEED") != "" {
				t.Logf("step %d now %v model %q tokens %d allowed %v refused %v kpw %+v", step, now.Format(time.RFC3339Nano), model, req.Tokens, got.Allowed, got.Refused, pg.Plan)
			}
			if !got.Allowed {
				refused++
				if got.Calendar != 0 || got.Session {
					quotaRefusals++
				}
				if got.Lent {
					lentRefusals++
				}
				continue
			}
			allowed++
			rec := llmrate.ReconcileRequest{Key: key, Workspace: ws, Model: model, KeyLimits: req.KeyLimits, WorkspaceLimits: req.WorkspaceLimits, KeyPlan: req.KeyPlan,
				WorkspacePlan: req.WorkspacePlan, Solo: solo, ID: req.ID, Estimate: req.Tokens, Actual: rng.Int64N(6000),
				InputEstimate: req.InputTokens, InputActual: rng.Int64N(6000), OutputActual: rng.Int64N(6000),
				Refund: rng.IntN(6) == 0, Admitted: req.Now, Receipt: got.Receipt}
			pending = append(pending, pendingRec{rec})
			for len(pending) > 0 && rng.IntN(3) != 0 {
				i := rng.IntN(len(pending))
				p := pending[i]
				pending = append(pending[:i], pending[i+1:]...)
				p.rec.Now = now
				mrec, rrec := p.rec, p.rec
				mrec.Receipt = "" // the memory store's: the admission's Now in Admitted
				if os.Getenv("LLMRATE_QUOTA_SEED") != "" {
					t.Logf("  reconcile model %q est %d act %d refund %v admitted %v", p.rec.Model, p.rec.Estimate, p.rec.Actual, p.rec.Refund, p.rec.Admitted.Format(time.RFC3339Nano))
				}
				require.NoError(t, mem.Reconcile(ctx, mrec))
				require.NoError(t, rs.Reconcile(ctx, rrec))
				require.NoError(t, rs.Reconcile(ctx, rrec)) // a repeat: not applied again
			}
		}
	}
	t.Logf("%d steps: %d allowed, %d refused (%d by a calendar or session window, %d by a lent one)", steps, allowed, refused, quotaRefusals, lentRefusals)
	require.Greater(t, quotaRefusals, steps/20)
	require.Greater(t, lentRefusals, steps/50)
}

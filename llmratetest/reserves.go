package llmratetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
)

// Reserves in millionths (AdmitRequest.Reserve).
const (
	half  = 500_000
	third = 333_333
)

// runReserves checks priority reserves (AdmitRequest.Reserve) through the
// Store interface, with hand-worked floors ⌈r × capacity⌉: a reserved
// request stops at the floor of each per-minute bucket (capacity twice the
// figure), of a window's bucket (capacity the figure; an output meter at
// its floor plus 1) and of a gauge (slots kept free), refused with
// ByReserve and the wait until it fits above the floor; a request without
// a reserve spends to the bottom; a lone reserved class reaches exactly
// (1 − r) of each bucket; a request larger than the capacity less the
// floor never fits; a reserved request is never granted a reservation
// (MaxWait): it would be debited below its floor, so it is refused with
// the wait until it fits above it, while one without a reserve still
// waits; a refusal debits nothing.
func runReserves(t *testing.T, f factory) {
	for _, solo := range []bool{false, true} {
		t.Run(fmt.Sprintf("PerMinute/Solo=%v", solo), func(t *testing.T) {
			e := newStoreEnv(t, f)
			lim := llmrate.Limits{RequestsPerMinute: 60, TokensPerMinute: 1000} // capacities 120 and 2,000: floors 60 and 1,000 at one half
			base := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim, WorkspaceLimits: lim, Solo: solo, Reserve: half}
			if solo {
				base.Workspace = "k"
			}
			req := base
			req.Tokens = 600
			d, _ := e.admit(req)
			mustEqual(t, true, d.Allowed, "600 of 2,000: 1,400 left, above the floor of 1,000")
			req.Tokens = 400
			d, _ = e.admit(req)
			mustEqual(t, true, d.Allowed, "400 more: exactly the floor left")
			equal(t, int64(1000), d.Remaining[llmrate.KeyTokens], "the key's tokens at the floor")
			equal(t, int64(118), d.Remaining[llmrate.KeyRequests], "two requests")
			req.Tokens = 1
			d, _ = e.admit(req)
			mustEqual(t, false, d.Allowed, "one token below the floor")
			equal(t, llmrate.KeyTokens, d.Refused, "the first bucket without room above its floor")
			equal(t, true, d.ByReserve, "it had room without the reserve")
			equal(t, false, d.NeverFits, "it fits once one token is back")
			retryWithin(t, d, 60*time.Millisecond, "one token at 1,000 per minute")
			equal(t, int64(1000), d.Remaining[llmrate.KeyTokens], "a refusal debits nothing")

			plain := base
			plain.Reserve, plain.Tokens = 0, 1000
			d, _ = e.admit(plain)
			mustEqual(t, true, d.Allowed, "no reserve: the rest of the bucket")
			equal(t, int64(0), d.Remaining[llmrate.KeyTokens], "spent to the bottom")
			plain.Tokens = 1
			d, _ = e.admit(plain)
			mustEqual(t, false, d.Allowed, "nothing left")
			equal(t, false, d.ByReserve, "no reserve: not refused by one")

			e.clock.Advance(30 * time.Second) // 500 tokens back
			req.Tokens = 100
			d, _ = e.admit(req)
			mustEqual(t, false, d.Allowed, "500 left, 100 asked, floor 1,000")
			equal(t, true, d.ByReserve, "500 would hold 100 without the reserve")
			retryWithin(t, d, 36*time.Second, "from 500 to 1,100 at 1,000 per minute")
			plain.Tokens = 500
			d, _ = e.admit(plain)
			equal(t, true, d.Allowed, "no reserve: the 500 back")
		})
	}
	t.Run("WorkspaceFloor", func(t *testing.T) {
		e := newStoreEnv(t, f)
		kl := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 100_000}
		wl := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1000} // floor 1,000 of 2,000 at one half
		base := llmrate.AdmitRequest{Key: "k1", Workspace: "ws", KeyLimits: kl, WorkspaceLimits: wl, Tokens: 800, Reserve: half}
		d, _ := e.admit(base)
		mustEqual(t, true, d.Allowed, "800 of the workspace's 2,000")
		d, _ = e.admit(base)
		mustEqual(t, false, d.Allowed, "1,200 left: 800 more would go below 1,000")
		equal(t, llmrate.WorkspaceTokens, d.Refused, "the workspace's floor")
		equal(t, true, d.ByReserve, "by the reserve")
		equal(t, [4]int64{1999, 199_200, 1999, 1200}, d.Remaining, "all or nothing: the key's buckets not debited either")
		k2 := base
		k2.Key, k2.Tokens = "k2", 200
		d, _ = e.admit(k2)
		mustEqual(t, true, d.Allowed, "another key of the class: exactly to the workspace's floor")
		equal(t, int64(1000), d.Remaining[llmrate.WorkspaceTokens], "the workspace at its floor")
		k2.Reserve, k2.Tokens = 0, 1000
		d, _ = e.admit(k2)
		mustEqual(t, true, d.Allowed, "no reserve: the workspace's last 1,000")
	})
	t.Run("LoneClass", func(t *testing.T) {
		// A reserve of 333,333 millionths: floors ⌈0.333333 × 20⌉ = 7
		// requests and ⌈0.333333 × 2,000⌉ = 667 tokens.
		e := newStoreEnv(t, f)
		lim := llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000}
		base := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Reserve: third}
		n := 0
		for range 20 {
			if d, _ := e.admit(base); !d.Allowed {
				equal(t, llmrate.KeyRequests, d.Refused, "the requests bucket's floor")
				equal(t, true, d.ByReserve, "by the reserve")
				break
			}
			n++
		}
		equal(t, 13, n, "a lone class reaches 20 − 7 requests")
		e.clock.Advance(2 * time.Minute) // full again
		base.Tokens = 1333
		d, _ := e.admit(base)
		mustEqual(t, true, d.Allowed, "2,000 − 667 tokens at once")
		equal(t, int64(667), d.Remaining[llmrate.WorkspaceTokens], "the workspace at its floor")
		e.clock.Advance(2 * time.Minute)
		base.Tokens = 1334
		d, _ = e.admit(base)
		equal(t, false, d.Allowed, "one token more than 2,000 − 667")
		equal(t, true, d.NeverFits, "larger than the capacity less the floor: never fits")
		equal(t, true, d.ByReserve, "the full bucket would hold it without the reserve")
		base.Reserve = 0
		d, _ = e.admit(base)
		equal(t, true, d.Allowed, "the same request without a reserve fits")
	})
	t.Run("Window", func(t *testing.T) {
		e := newStoreEnv(t, f)
		lim := bigMinute(llmrate.Window{Per: time.Hour, Requests: 10, Tokens: 1000}) // floors 5 and 500 at one half
		base := llmrate.AdmitRequest{Key: "k", Workspace: "k", KeyLimits: lim, WorkspaceLimits: lim, Solo: true, Tokens: 100, Reserve: half}
		for i := range 5 {
			d, _ := e.admit(base)
			mustEqual(t, true, d.Allowed, "reserved request %d of 5", i+1)
		}
		d, _ := e.admit(base)
		mustEqual(t, false, d.Allowed, "the window's floors: 5 requests, 500 tokens")
		equal(t, llmrate.KeyRequests, d.Refused, "the window's requests meter comes first")
		equal(t, time.Hour, d.Window, "Decision.Window")
		equal(t, true, d.ByReserve, "by the reserve")
		retryWithin(t, d, 6*time.Minute, "one request (and 100 tokens) back at 10 (1,000) per hour")
		if len(d.KeyWindows) == 1 {
			equal(t, llmrate.WindowLevels{Requests: 5, Tokens: 500}, d.KeyWindows[0], "at the floors, nothing debited by the refusal")
		} else {
			t.Errorf("KeyWindows %v, want one window's levels", d.KeyWindows)
		}
		base.Reserve, base.Tokens = 0, 500
		d, _ = e.admit(base)
		mustEqual(t, true, d.Allowed, "no reserve: below the floor")
		if len(d.KeyWindows) == 1 {
			equal(t, llmrate.WindowLevels{Requests: 4, Tokens: 0}, d.KeyWindows[0], "to the bottom")
		}
	})
	t.Run("OutputMeter", func(t *testing.T) {
		e := newStoreEnv(t, f)
		lim := bigMinute(llmrate.Window{Per: time.Minute, OutputTokens: 100}) // floor 50: admitted at 51 or more
		base := llmrate.AdmitRequest{Key: "k", Workspace: "k", KeyLimits: lim, WorkspaceLimits: lim, Solo: true, Tokens: 1, Reserve: half}
		d, req := e.admit(base)
		mustEqual(t, true, d.Allowed, "output full")
		err := e.s.Reconcile(t.Context(), llmrate.ReconcileRequest{Key: "k", Workspace: "k", KeyLimits: lim, WorkspaceLimits: lim, Solo: true,
			Estimate: 1, Actual: 1, OutputActual: 49, Now: e.clock.Now(), ID: req.ID, Receipt: d.Receipt})
		if err != nil {
			t.Fatal(err)
		}
		d, req = e.admit(base)
		mustEqual(t, true, d.Allowed, "51 output tokens left: the floor plus 1")
		err = e.s.Reconcile(t.Context(), llmrate.ReconcileRequest{Key: "k", Workspace: "k", KeyLimits: lim, WorkspaceLimits: lim, Solo: true,
			Estimate: 1, Actual: 1, OutputActual: 1, Now: e.clock.Now(), ID: req.ID, Receipt: d.Receipt})
		if err != nil {
			t.Fatal(err)
		}
		d, _ = e.admit(base)
		mustEqual(t, false, d.Allowed, "50 left: the floor")
		equal(t, llmrate.KeyOutputTokens, d.Refused, "the output meter")
		equal(t, true, d.ByReserve, "by the reserve")
		retryWithin(t, d, 600*time.Millisecond, "one output token at 100 per minute")
		base.Reserve = 0
		d, _ = e.admit(base)
		equal(t, true, d.Allowed, "no reserve: admitted while at least 1")
	})
	t.Run("Gauge", func(t *testing.T) {
		e := newStoreEnv(t, f)
		kl := llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 100_000}
		wl := kl
		wl.ConcurrentRequests = 4 // one half keeps 2 slots free
		base := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: kl, WorkspaceLimits: wl, Tokens: 1, Reserve: half}
		var held []llmrate.AdmitRequest
		var decided []llmrate.Decision
		for i := range 2 {
			d, req := e.admit(base)
			mustEqual(t, true, d.Allowed, "reserved %d of 2 (2 of 4 kept free)", i+1)
			held, decided = append(held, req), append(decided, d)
		}
		d, _ := e.admit(base)
		mustEqual(t, false, d.Allowed, "a third would leave one slot free")
		equal(t, llmrate.WorkspaceConcurrent, d.Refused, "the workspace's gauge")
		equal(t, true, d.ByReserve, "two slots free")
		equal(t, time.Second, d.RetryAfter, "a gauge's wait")
		equal(t, decided[1].Remaining, d.Remaining, "a gauge's refusal debits no bucket")
		plain := base
		plain.Reserve = 0
		for i := range 2 {
			d, _ = e.admit(plain)
			equal(t, true, d.Allowed, "no reserve: slot %d of the 2 kept", i+3)
		}
		d, _ = e.admit(plain)
		equal(t, false, d.Allowed, "all 4 in flight")
		equal(t, false, d.ByReserve, "no free slot at all")
		e.end(held[0], decided[0], false)
		d, _ = e.admit(base)
		equal(t, false, d.Allowed, "3 in flight: still above the reserved class's share")
		equal(t, true, d.ByReserve, "one slot free, kept")
	})
	t.Run("MaxWait", func(t *testing.T) {
		e := newStoreEnv(t, f)
		lim := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 60_000} // capacity 120,000, 1,000 per second; floor 60,000
		plain := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 60_000}
		d, _ := e.admit(plain)
		mustEqual(t, true, d.Allowed, "half the bucket, no reserve")
		res := plain
		res.Reserve, res.Tokens, res.MaxWait = half, 1000, 5*time.Second
		d, _ = e.admit(res)
		mustEqual(t, false, d.Allowed, "no reservation below the floor: it would be debited now")
		equal(t, llmrate.KeyTokens, d.Refused, "refused by")
		equal(t, true, d.ByReserve, "60,000 would hold 1,000 without the reserve")
		equal(t, time.Second, d.RetryAfter, "until 1,000 tokens fit above the floor")
		equal(t, time.Duration(0), d.Wait, "refused: no wait")
		equal(t, int64(60_000), d.Remaining[llmrate.KeyTokens], "nothing debited")
		plain.Tokens, plain.MaxWait = 4000, 5*time.Second
		d, _ = e.admit(plain)
		mustEqual(t, true, d.Allowed, "no reserve: fits now")
		equal(t, time.Duration(0), d.Wait, "no wait")
		d, _ = e.admit(res)
		mustEqual(t, false, d.Allowed, "56,000 left")
		equal(t, 5*time.Second, d.RetryAfter, "from 56,000 to 61,000 at 1,000 per second")
		plain.Tokens = 60_000
		d, _ = e.admit(plain)
		mustEqual(t, true, d.Allowed, "no reserve: a reservation, as without reserves")
		equal(t, 4*time.Second, d.Wait, "from 56,000 to 60,000")
		equal(t, int64(-4000), d.Remaining[llmrate.KeyTokens], "debited now")
	})
}

package llmratetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
)

// storeEnv drives a store directly through the Store interface, for the
// parts of the contract a caller other than the limiter relies on
// (gauges, reservations, refunds), with hand-worked expectations.
type storeEnv struct {
	t     *testing.T
	clock *Clock
	s     llmrate.Store
	n     int
}

func newStoreEnv(t *testing.T, f factory) *storeEnv {
	t.Helper()
	c := NewClock()
	s := f(t, c.Now)
	t.Cleanup(func() {
		if cl, ok := s.(interface{ Close(context.Context) error }); ok {
			if err := cl.Close(context.Background()); err != nil {
				t.Errorf("closing the store: %v", err)
			}
		}
	})
	return &storeEnv{t: t, clock: c, s: s}
}

// id returns a fresh admission identity.
func (e *storeEnv) id() string {
	e.n++
	return fmt.Sprintf("%s-%d", llmrate.NewAdmissionID(), e.n)
}

// admit admits req (Now and, when empty, ID filled in) and fails the test on
// an error.
func (e *storeEnv) admit(req llmrate.AdmitRequest) (llmrate.Decision, llmrate.AdmitRequest) {
	e.t.Helper()
	req.Now = e.clock.Now()
	if req.ID == "" {
		req.ID = e.id()
	}
	d, err := e.s.Admit(context.Background(), req)
	if errors.Is(err, errors.ErrUnsupported) {
		e.t.Skipf("the store does not support this part of the contract: %v", err)
	}
	if err != nil {
		e.t.Fatalf("Admit(%q, %q, %q): %v", req.Key, req.Workspace, req.Model, err)
	}
	return d, req
}

// end reconciles an admission at its estimate (releasing its slots), or
// refunds it.
func (e *storeEnv) end(req llmrate.AdmitRequest, d llmrate.Decision, refund bool) {
	e.t.Helper()
	err := e.s.Reconcile(context.Background(), llmrate.ReconcileRequest{Key: req.Key, Workspace: req.Workspace, Model: req.Model,
		KeyLimits: req.KeyLimits, WorkspaceLimits: req.WorkspaceLimits, Estimate: req.Tokens, Actual: req.Tokens, Solo: req.Solo,
		Now: e.clock.Now(), ID: req.ID, Receipt: d.Receipt, Refund: refund})
	if err != nil {
		e.t.Fatalf("Reconcile(%q): %v", req.Key, err)
	}
}

// runGauges checks Limits.ConcurrentRequests through the Store interface:
// the key's and the workspace's gauges, checked after the four buckets and
// all or nothing with them; slots released by the admission's reconcile,
// exactly once, whatever the caller resends; Solo and model gauges.
func runGauges(t *testing.T, f factory) {
	lim := func(c int64) llmrate.Limits {
		return llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 200_000, ConcurrentRequests: c}
	}
	t.Run("KeyAndWorkspace", func(t *testing.T) {
		e := newStoreEnv(t, f)
		base := llmrate.AdmitRequest{Key: "k1", Workspace: "acme", KeyLimits: lim(2), WorkspaceLimits: lim(3), Tokens: 10}
		var held []llmrate.AdmitRequest
		var decided []llmrate.Decision
		for i := range 2 {
			d, req := e.admit(base)
			mustEqual(t, true, d.Allowed, "admission %d of k1 (key figure 2)", i+1)
			held, decided = append(held, req), append(decided, d)
		}
		d, _ := e.admit(base)
		equal(t, false, d.Allowed, "a third of k1 in flight")
		equal(t, llmrate.KeyConcurrent, d.Refused, "refused by")
		if d.RetryAfter < time.Second {
			t.Errorf("a gauge's RetryAfter = %v, want at least 1 s", d.RetryAfter)
		}
		equal(t, decided[1].Remaining, d.Remaining, "a gauge's refusal debits no bucket")

		k2 := base
		k2.Key = "k2"
		d, req := e.admit(k2)
		mustEqual(t, true, d.Allowed, "k2: the workspace's third slot")
		held, decided = append(held, req), append(decided, d)
		d, _ = e.admit(k2)
		equal(t, false, d.Allowed, "a fourth in the workspace")
		equal(t, llmrate.WorkspaceConcurrent, d.Refused, "refused by")

		other := base
		other.Workspace = "globex"
		d, _ = e.admit(other)
		equal(t, true, d.Allowed, "k1 in another workspace has gauges of its own")

		e.end(held[0], decided[0], false)
		d, req = e.admit(base)
		mustEqual(t, true, d.Allowed, "the reconcile released k1's slot and the workspace's")
		held, decided = append(held, req), append(decided, d)
		for range 3 {
			e.end(held[0], decided[0], false) // resent: releases nothing more
		}
		d, _ = e.admit(base)
		equal(t, false, d.Allowed, "a resent reconcile released nothing more (k1: 2 in flight)")
		equal(t, llmrate.KeyConcurrent, d.Refused, "refused by")
		d, _ = e.admit(k2)
		equal(t, false, d.Allowed, "nor in the workspace (3 in flight)")
		equal(t, llmrate.WorkspaceConcurrent, d.Refused, "refused by")

		for i := 1; i < len(held); i++ {
			e.end(held[i], decided[i], false)
		}
		for i := range 2 {
			d, _ = e.admit(base)
			equal(t, true, d.Allowed, "k1 after every release, %d", i+1)
		}
	})
	t.Run("AllOrNothing", func(t *testing.T) {
		e := newStoreEnv(t, f)
		base := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim(1), WorkspaceLimits: lim(1), Tokens: 500_000}
		d, _ := e.admit(base)
		equal(t, false, d.Allowed, "500,000 tokens never fit 400,000")
		equal(t, llmrate.KeyTokens, d.Refused, "a bucket is checked before the gauges")
		base.Tokens = 100
		d, req := e.admit(base)
		mustEqual(t, true, d.Allowed, "the refused request took no slot")
		equal(t, [4]int64{199, 399_900, 199, 399_900}, d.Remaining, "the refused request took nothing")
		e.end(req, d, false)
	})
	t.Run("Solo", func(t *testing.T) {
		e := newStoreEnv(t, f)
		base := llmrate.AdmitRequest{Key: "sk", Workspace: "sk", KeyLimits: lim(1), WorkspaceLimits: lim(1), Tokens: 1, Solo: true}
		d, req := e.admit(base)
		mustEqual(t, true, d.Allowed, "the first")
		d2, _ := e.admit(base)
		equal(t, false, d2.Allowed, "one slot for a Solo key")
		equal(t, llmrate.KeyConcurrent, d2.Refused, "a Solo key's one gauge is named as the key's")
		e.end(req, d, false)
		e.end(req, d, false)
		d, _ = e.admit(base)
		equal(t, true, d.Allowed, "released")
		d, _ = e.admit(base)
		equal(t, false, d.Allowed, "released once")
	})
	t.Run("Models", func(t *testing.T) {
		e := newStoreEnv(t, f)
		base := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim(1), WorkspaceLimits: lim(1), Tokens: 1}
		d, _ := e.admit(base)
		mustEqual(t, true, d.Allowed, "default buckets")
		m := base
		m.Model = "o3"
		d, _ = e.admit(m)
		equal(t, true, d.Allowed, "a model entry has gauges of its own")
		d, _ = e.admit(m)
		equal(t, false, d.Allowed, "and they hold")
		equal(t, llmrate.KeyConcurrent, d.Refused, "refused by")
	})
	t.Run("FigureChange", func(t *testing.T) {
		e := newStoreEnv(t, f)
		base := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim(3), WorkspaceLimits: lim(0), Tokens: 1}
		var held []llmrate.AdmitRequest
		var decided []llmrate.Decision
		for range 3 {
			d, req := e.admit(base)
			mustEqual(t, true, d.Allowed, "under 3")
			held, decided = append(held, req), append(decided, d)
		}
		low := base
		low.KeyLimits = lim(2)
		d, _ := e.admit(low)
		equal(t, false, d.Allowed, "3 held count against a new figure of 2")
		e.end(held[0], decided[0], false)
		d, _ = e.admit(low)
		equal(t, false, d.Allowed, "2 held, figure 2")
		e.end(held[1], decided[1], false)
		d, _ = e.admit(low)
		equal(t, true, d.Allowed, "1 held, figure 2")
	})
}

// runReservations checks AdmitRequest.MaxWait through the Store interface,
// worked by hand: 60 RPM and 6,000 TPM refill 1 request and 100 tokens a
// second into buckets of 120 and 12,000.
func runReservations(t *testing.T, f factory) {
	lim := llmrate.Limits{RequestsPerMinute: 60, TokensPerMinute: 6000}
	for _, solo := range []bool{false, true} {
		t.Run(fmt.Sprintf("Solo=%v", solo), func(t *testing.T) {
			e := newStoreEnv(t, f)
			base := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim, WorkspaceLimits: lim, Solo: solo, MaxWait: 5 * time.Second}
			if solo {
				base.Workspace = "k"
			}
			req := base
			req.Tokens = 12_000
			d, _ := e.admit(req)
			mustEqual(t, true, d.Allowed, "the whole bucket")
			equal(t, time.Duration(0), d.Wait, "fits now: no wait")

			req.Tokens = 100
			d1, r1 := e.admit(req)
			mustEqual(t, true, d1.Allowed, "a reservation")
			equal(t, time.Second, d1.Wait, "100 tokens at 100/s")
			equal(t, int64(-100), d1.Remaining[llmrate.KeyTokens], "debited now, below zero")
			req.Tokens = 200
			d2, r2 := e.admit(req)
			mustEqual(t, true, d2.Allowed, "a second reservation")
			equal(t, 3*time.Second, d2.Wait, "behind the first: 300 tokens at 100/s")

			req.Tokens = 300
			d, _ = e.admit(req)
			equal(t, false, d.Allowed, "6 s > MaxWait")
			equal(t, llmrate.KeyTokens, d.Refused, "refused by")
			equal(t, 6*time.Second, d.RetryAfter, "Retry-After counts the reservations ahead")

			e.end(r2, d2, true)
			d, _ = e.admit(req)
			mustEqual(t, true, d.Allowed, "the refund credited 200 tokens back: 400 short")
			equal(t, 4*time.Second, d.Wait, "400 tokens at 100/s")
			e.end(r1, d1, true)
			e.clock.Advance(4 * time.Second)
			req.Tokens = 1
			req.MaxWait = 0
			d, _ = e.admit(req)
			mustEqual(t, true, d.Allowed, "four seconds later the reservation is paid")
			equal(t, int64(99), d.Remaining[llmrate.KeyTokens], "-400 + 100 (refund) + 400 (refill) - 1")
			equal(t, int64(119), d.Remaining[llmrate.KeyRequests], "118 + 4 s of refill, capped at 120, - 1")
		})
	}
	t.Run("FairOrder", func(t *testing.T) {
		// 40 callers at once, after the bucket is drained: each is told a
		// distinct wait, one second per 100 tokens ahead of it.
		e := newStoreEnv(t, f)
		base := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 12_000, MaxWait: 50 * time.Second}
		d, _ := e.admit(base)
		mustEqual(t, true, d.Allowed, "the whole bucket")
		base.Tokens = 100
		now := e.clock.Now()
		var mu sync.Mutex
		var waits []time.Duration
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := base
				req.Now, req.ID = now, fmt.Sprintf("fair-%d-%s", i, llmrate.NewAdmissionID())
				d, err := e.s.Admit(context.Background(), req)
				mu.Lock()
				defer mu.Unlock()
				if err != nil || !d.Allowed {
					t.Errorf("caller %d: %v, allowed %v", i, err, d.Allowed)
					return
				}
				waits = append(waits, d.Wait)
			}()
		}
		wg.Wait()
		slices.Sort(waits)
		for i, w := range waits {
			equal(t, time.Duration(i+1)*time.Second, w, "the wait of the %d-th decided", i+1)
		}
	})
}

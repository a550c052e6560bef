package llmrate

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReview3HotKeyOneProc: with GOMAXPROCS=1, 64 goroutines decide on one
// hot key (its entry's spin lock contended, its holders preempted) while
// four more flood the same tables with new keys (inserts and grows racing
// the lock-free lookups; no eviction, which would by design refill a hot
// key that is not in debt). Every call returns, and
// the hot key admits exactly its burst on a frozen clock: 2 × 500 requests,
// split between Solo and separate-workspace callers of two keys that share
// nothing. Its reconciles (refunds of one request each, for a tenth of the
// admissions) add exactly that many back.
func TestReview3HotKeyOneProc(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	s := NewMemoryStore()
	now := time.Unix(1_700_000_000, 0)
	ctx := context.Background()
	lim := Limits{RequestsPerMinute: 500, TokensPerMinute: MaxPerMinute}
	const goroutines, per = 64, 40
	var allowed [2]atomic.Int64
	var refunds [2]atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var flood sync.WaitGroup
	for f := range 4 {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if i == 20_000 {
					return // bounded, whatever the scheduler does
				}
				k := fmt.Sprintf("flood-%d-%d", f, i)
				_, _ = s.Admit(ctx, AdmitRequest{Key: k, Workspace: "ws-flood", KeyLimits: lim, WorkspaceLimits: hugeLimits, Tokens: 1, Now: now})
			}
		}()
	}
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			which := g % 2
			r := AdmitRequest{Key: "sk-hot", Workspace: "sk-hot", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true, Now: now}
			if which == 1 {
				r = AdmitRequest{Key: "sk-hot2", Workspace: "ws-hot2", KeyLimits: lim, WorkspaceLimits: hugeLimits, Tokens: 1, Now: now}
			}
			for i := range per {
				d, err := s.Admit(ctx, r)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed[which].Add(1)
					if i%10 == 0 {
						refunds[which].Add(1)
						_ = s.Reconcile(ctx, ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: r.KeyLimits, WorkspaceLimits: r.WorkspaceLimits, Solo: r.Solo, Estimate: 1, Refund: true, Now: now})
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	flood.Wait()
	for which := range 2 {
		// Each key gets 32 goroutines × 40 = 1,280 tries against a burst
		// of 1,000 plus the refunds it was given back.
		want := min(int64(goroutines/2*per), 2*lim.RequestsPerMinute+refunds[which].Load())
		if got := allowed[which].Load(); got != want {
			t.Errorf("hot key %d: %d admitted, want %d (burst %d + %d refunds)", which, got, want, 2*lim.RequestsPerMinute, refunds[which].Load())
		}
	}
	if s.Evictions() != 0 {
		t.Fatalf("%d lossy evictions: the test expects none", s.Evictions())
	}
}

// TestReview3EvictionWaitsForAHeldEntry: a decision holds a key's entry (as
// admit does between finding it and releasing it) while a flood of new
// keys fills every shard of a store bounded at one entry per shard, so
// that the flood's makeRoom visits that entry. The decision then puts the
// entry in debt and releases it. The debt must survive: the flood waited
// for the entry and, finding it in debt, passed it over, rather than
// evicting it under the decision (which would have written its debit into
// a dropped entry).
func TestReview3EvictionWaitsForAHeldEntry(t *testing.T) {
	for _, solo := range []bool{true, false} {
		t.Run(fmt.Sprintf("solo=%v", solo), func(t *testing.T) {
			s := NewMemoryStore(WithMaxKeys(memShards))
			now := time.Unix(1_700_000_000, 0)
			ctx := context.Background()
			lim := Limits{RequestsPerMinute: 10, TokensPerMinute: 100}
			key, ws := "sk-debtor", "sk-debtor"
			if !solo {
				ws = "ws-debtor"
			}
			d, err := s.Admit(ctx, AdmitRequest{Key: key, Workspace: ws, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: solo, Now: now})
			if err != nil || !d.Allowed {
				t.Fatalf("first admission: %+v, %v", d, err)
			}
			n := now.UnixNano()
			// Hold the entries as a decision does.
			var ks, wsh *memShard
			var ke, we *entry
			if solo {
				wsh, we, _ = s.soloEntry(ws, "", lim, n)
			} else {
				ks, wsh, ke, we, _ = s.pair(key, ws, "", lim, lim, n)
			}
			var flooded atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := range 4 * memShards {
					k := fmt.Sprintf("flood-%d", i)
					_, _ = s.Admit(ctx, AdmitRequest{Key: k, Workspace: k, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: solo, Now: now})
					if !solo {
						_, _ = s.Admit(ctx, AdmitRequest{Key: k, Workspace: ws, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Now: now})
					}
					flooded.Add(1)
				}
			}()
			// Give the flood time to reach the held entries (not a wait for
			// refill: the test holds whatever the timing).
			for range 50 {
				if flooded.Load() >= 4*memShards {
					break
				}
				time.Sleep(time.Millisecond)
			}
			// Charge 400 tokens on an estimate of 1: the tokens bucket (200,
			// less the admission's 1) goes to -200.
			rec := ReconcileRequest{Key: key, Workspace: ws, KeyLimits: lim, WorkspaceLimits: lim, Estimate: 1, Actual: 400, Solo: solo, Now: now}
			reconcileEntry(we, rec, WorkspaceTokens, lim)
			we.settle(lim)
			if solo {
				we.release(wsh.epoch.Load())
			} else {
				reconcileEntry(ke, rec, KeyTokens, lim)
				ke.settle(lim)
				releasePair(ks, wsh, ke, we)
			}
			<-done
			got := s.Levels(key, ws, lim, lim, now)
			if got[KeyTokens] != -200 || got[WorkspaceTokens] != -200 {
				t.Errorf("levels after the flood %v: want tokens at -200 for key and workspace (the debt kept)", got)
			}
			if s.Evictions() == 0 {
				t.Errorf("the flood evicted nothing: it did not fill the shards")
			}
		})
	}
}

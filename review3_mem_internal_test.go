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

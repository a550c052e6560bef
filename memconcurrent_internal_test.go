package llmrate

import (
	"context"
	"fmt"
	"github.com/llmrate/llmrate/internal/memstore"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The memory store finds known entries without its shards' locks
// (entryTable.lookup) while other goroutines insert, evict, sweep and grow
// the same tables. These tests hammer it from several goroutines and check
// exact invariants; run them under -race (the CI does).

// privateKey is a key only one goroutine uses, with figures of its own:
// capacities 20,000 apart and fewer than 10,000 admissions each, so the
// level an admission reports tells whose entry it debited.
type privateKey struct {
	key, workspace string
	solo           bool
	lim            Limits
	prev           int64 // the level last reported; -1: none yet
	resets         int   // admissions that found a full entry again
}

func newPrivateKeys(g, n int, prefix string) []*privateKey {
	keys := make([]*privateKey, n)
	for j := range keys {
		id := g*n + j
		k := &privateKey{key: fmt.Sprintf("sk-%s-%d-%d", prefix, g, j), lim: Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: int64(10_000 * (1 + id))}, prev: -1}
		k.workspace, k.solo = k.key, j%2 == 0
		if !k.solo {
			k.workspace = fmt.Sprintf("ws-%s-%d", prefix, g)
		}
		keys[j] = k
	}
	return keys
}

var hugeLimits = Limits{RequestsPerMinute: MaxPerMinute, TokensPerMinute: MaxPerMinute}

// use admits one token on k at now and checks that the level reported is
// k's own: one below the last (its entry), or one below full (its entry
// dropped meanwhile, a fresh one made).
func (k *privateKey) use(t *testing.T, s *MemoryStore, now time.Time) bool {
	wl := hugeLimits
	if k.solo {
		wl = k.lim
	}
	d, err := s.Admit(context.Background(), AdmitRequest{Key: k.key, Workspace: k.workspace, KeyLimits: k.lim, WorkspaceLimits: wl, Tokens: 1, Solo: k.solo, Now: now})
	if err != nil || !d.Allowed {
		t.Errorf("%s: %+v, %v: a private key within its burst was refused", k.key, d, err)
		return false
	}
	got, full := d.Remaining[KeyTokens], 2*k.lim.TokensPerMinute
	switch {
	case k.prev >= 0 && got == k.prev-1:
	case got == full-1:
		if k.prev >= 0 {
			k.resets++
		}
	default:
		t.Errorf("%s: level %d after an admission, want %d (its entry) or %d (a fresh one): another key's entry?", k.key, got, k.prev-1, full-1)
		return false
	}
	k.prev = got
	// A reconcile charging exactly the estimate changes no level, and takes
	// the same path.
	_ = s.Reconcile(context.Background(), ReconcileRequest{Key: k.key, Workspace: k.workspace, KeyLimits: k.lim, WorkspaceLimits: wl, Solo: k.solo, Estimate: 1, Actual: 1, Now: now})
	return true
}

// TestMemoryStoreConcurrentExact: on a frozen clock, goroutines share two
// keys in debt (one Solo, one in a workspace of its own), each uses private
// keys, and all flood a store bounded at 4 entries per shard with new keys,
// so entries are inserted, evicted and looked up in the same tables at
// once; some admissions take a gauge (the locked path) and every admission
// is followed by a reconcile. An entry in debt is never dropped, so each
// shared key admits exactly what its buckets allow: 120 tokens of burst,
// then reservations while the wait is at most MaxWait (50 s at 1 token a
// second: levels down to -50), 170 in all, each debit from a distinct
// level. A private key's levels show that no lookup returned another key's
// entry.
func TestMemoryStoreConcurrentExact(t *testing.T) {
	const goroutines, ops, privates = 6, 2500, 4
	s := NewMemoryStore(WithMaxKeys(4 * memstore.Shards))
	now := time.Unix(1_700_000_000, 0)
	ctx := context.Background()
	lim := Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 60} // 1 token a second, burst 120
	const maxWait = 50 * time.Second
	type shared struct {
		key, workspace string
		solo           bool
	}
	shareds := []shared{{"sk-shared-solo", "sk-shared-solo", true}, {"sk-shared-sep", "ws-shared", false}}
	admitShared := func(sk shared, id string) (Decision, error) {
		kl, wl := lim, hugeLimits
		if sk.solo {
			wl = lim
		}
		if id != "" { // under a gauge: the locked path
			kl.ConcurrentRequests, wl.ConcurrentRequests = 100, 100
		}
		return s.Admit(ctx, AdmitRequest{ID: id, Key: sk.key, Workspace: sk.workspace, KeyLimits: kl, WorkspaceLimits: wl, Tokens: 1, Solo: sk.solo, MaxWait: maxWait, Now: now})
	}
	reconcileShared := func(sk shared, id string) {
		kl, wl := lim, hugeLimits
		if sk.solo {
			wl = lim
		}
		if id != "" {
			kl.ConcurrentRequests, wl.ConcurrentRequests = 100, 100
		}
		_ = s.Reconcile(ctx, ReconcileRequest{ID: id, Key: sk.key, Workspace: sk.workspace, KeyLimits: kl, WorkspaceLimits: wl, Solo: sk.solo, Estimate: 1, Actual: 1, Now: now})
	}
	// Into debt first, alone: 121 admissions leave the level at -1.
	for _, sk := range shareds {
		for i := range 121 {
			d, err := admitShared(sk, "")
			if err != nil || !d.Allowed || d.Remaining[KeyTokens] != int64(119-i) {
				t.Fatalf("%s admission %d: %+v, %v", sk.key, i, d, err)
			}
		}
	}

	levels := make([][]int64, len(shareds)) // levels reported by the shared keys' admissions
	var mu sync.Mutex
	var wg sync.WaitGroup
	var flood atomic.Int64
	allPrivate := make([][]*privateKey, goroutines)
	for g := range goroutines {
		allPrivate[g] = newPrivateKeys(g, privates, "p")
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			mine := make([][]int64, len(shareds))
			for op := range ops {
				switch r := rng.IntN(10); {
				case r < 3: // a shared key, maybe under a gauge
					i := rng.IntN(len(shareds))
					id := ""
					if rng.IntN(4) == 0 {
						id = "g-" + strconv.Itoa(g) + "-" + strconv.Itoa(op)
					}
					d, err := admitShared(shareds[i], id)
					if err != nil {
						t.Errorf("%s: %v", shareds[i].key, err)
						return
					}
					if d.Allowed {
						mine[i] = append(mine[i], d.Remaining[KeyTokens])
					}
					reconcileShared(shareds[i], id)
				case r < 6:
					if !allPrivate[g][rng.IntN(privates)].use(t, s, now) {
						return
					}
				default: // a new key: an insertion, at the bound an eviction
					k := "sk-flood-" + strconv.FormatInt(flood.Add(1), 10)
					ws := k
					if r == 9 {
						ws = "ws-flood-" + strconv.Itoa(rng.IntN(8))
					}
					fl := Limits{RequestsPerMinute: 100, TokensPerMinute: 1000}
					_, _ = s.Admit(ctx, AdmitRequest{Key: k, Workspace: ws, KeyLimits: fl, WorkspaceLimits: fl, Tokens: 1, Solo: ws == k, Now: now})
				}
			}
			mu.Lock()
			for i := range mine {
				levels[i] = append(levels[i], mine[i]...)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, sk := range shareds {
		got := slices.Sorted(slices.Values(levels[i]))
		want := make([]int64, 0, 49)
		for l := int64(-50); l <= -2; l++ {
			want = append(want, l)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: levels after the concurrent admissions %v, want each of -50..-2 once (exactly the 49 reservations left)", sk.key, got)
		}
	}
	resets := 0
	for _, keys := range allPrivate {
		for _, k := range keys {
			resets += k.resets
		}
	}
	// On a frozen clock nothing is full again by time alone: only a lossy
	// eviction makes a private key start afresh.
	if int64(resets) > s.Evictions() {
		t.Errorf("%d private keys started afresh, more than the %d lossy evictions", resets, s.Evictions())
	}
	if s.Evictions() == 0 {
		t.Errorf("no eviction: the test did not exercise lookups racing deletes")
	}
	t.Logf("%d flood keys, %d lossy evictions, %d over the bound, %d private restarts", flood.Load(), s.Evictions(), s.OverBound(), resets)
	checkTables(t, s)
}

// TestMemoryStoreConcurrentSweeps: goroutines flood a store on a clock
// moving forward, so that its sweeps drop many entries at once (each
// delete shifting its probe run back) while other goroutines use private
// keys on a frozen clock; a private key's levels show that no lookup
// returned another key's entry.
func TestMemoryStoreConcurrentSweeps(t *testing.T) {
	const users, flooders, floodKeys, maxOps, privates = 3, 2, 40_000, 30_000, 4
	s := NewMemoryStore()
	t0 := time.Unix(1_700_000_000, 0)
	ctx := context.Background()
	var wg sync.WaitGroup
	var done atomic.Bool
	var flood atomic.Int64
	for range flooders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fl := Limits{RequestsPerMinute: 100, TokensPerMinute: 1000}
			for {
				n := flood.Add(1)
				if n > floodKeys {
					return
				}
				k := "sk-sweep-" + strconv.FormatInt(n, 10)
				// 50 ms a key: entries older than 2,400 keys are full again.
				at := t0.Add(time.Duration(n) * 50 * time.Millisecond)
				_, _ = s.Admit(ctx, AdmitRequest{Key: k, Workspace: k, KeyLimits: fl, WorkspaceLimits: fl, Tokens: 1, Solo: n%2 == 0, Now: at})
			}
		}()
	}
	var usersWG sync.WaitGroup
	allPrivate := make([][]*privateKey, users)
	for g := range users {
		allPrivate[g] = newPrivateKeys(g, privates, "sweep-p")
		usersWG.Add(1)
		go func() {
			defer usersWG.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			// Until the flood ends, at most maxOps (fewer than 10,000 a key).
			for op := 0; op < maxOps && !done.Load(); op++ {
				if !allPrivate[g][rng.IntN(privates)].use(t, s, t0) {
					return
				}
			}
		}()
	}
	wg.Wait()
	done.Store(true)
	usersWG.Wait()
	keys, _ := s.Len()
	resets := 0
	for _, ks := range allPrivate {
		for _, k := range ks {
			resets += k.resets
		}
	}
	// 40,000 keys over 128 shards of each kind sweep each shard a few
	// times (from 64 entries), dropping the entries older than 120 s.
	t.Logf("%d key entries left of %d flood keys, %d private restarts", keys, floodKeys, resets)
	if keys >= floodKeys/2 {
		t.Errorf("%d key entries left of %d: the sweeps dropped too few", keys, floodKeys)
	}
	checkTables(t, s)
}

// checkTables checks, with the store quiet, that every table is whole:
// its count matches its live entries, each found by get and by lookup, no
// entry left locked.
func checkTables(t *testing.T, s *MemoryStore) {
	t.Helper()
	for _, err := range s.t.Check() {
		t.Error(err)
	}
}

// TestHotKeyOneProc: with GOMAXPROCS=1, 64 goroutines decide on one
// hot key (its entry's spin lock contended, its holders preempted) while
// four more flood the same tables with new keys (inserts and grows racing
// the lock-free lookups; no eviction, which would by design refill a hot
// key that is not in debt). Every call returns, and
// the hot key admits exactly its burst on a frozen clock: 2 × 500 requests,
// split between Solo and separate-workspace callers of two keys that share
// nothing. Its reconciles (refunds of one request each, for a tenth of the
// admissions) add exactly that many back.
func TestHotKeyOneProc(t *testing.T) {
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

// TestEvictionWaitsForAHeldEntry: a decision holds a key's entry (as
// admit does between finding it and releasing it) while a flood of new
// keys fills every shard of a store bounded at one entry per shard, so
// that the flood's makeRoom visits that entry. The decision then puts the
// entry in debt and releases it. The debt must survive: the flood waited
// for the entry and, finding it in debt, passed it over, rather than
// evicting it under the decision (which would have written its debit into
// a dropped entry).
func TestEvictionWaitsForAHeldEntry(t *testing.T) {
	for _, solo := range []bool{true, false} {
		t.Run(fmt.Sprintf("solo=%v", solo), func(t *testing.T) {
			s := NewMemoryStore(WithMaxKeys(memstore.Shards))
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
				wsh, we, _ = s.t.SoloEntry(s.t.WorkspaceHash(ws, ""), perMinute(&lim), n)
			} else {
				pk, wh := s.t.Hashes(key, ws, "")
				ks, wsh, ke, we, _ = s.t.Pair(pk, wh, perMinute(&lim), perMinute(&lim), n)
			}
			var flooded atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := range 4 * memstore.Shards {
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
				if flooded.Load() >= 4*memstore.Shards {
					break
				}
				time.Sleep(time.Millisecond)
			}
			// Charge 400 tokens on an estimate of 1: the tokens bucket (200,
			// less the admission's 1) goes to -200.
			rec := ReconcileRequest{Key: key, Workspace: ws, KeyLimits: lim, WorkspaceLimits: lim, Estimate: 1, Actual: 400, Solo: solo, Now: now}
			reconcileEntry(we, &rec, WorkspaceTokens, lim)
			we.Settle(lim.RequestsPerMinute, lim.TokensPerMinute)
			if solo {
				we.Release(wsh.Epoch())
			} else {
				reconcileEntry(ke, &rec, KeyTokens, lim)
				ke.Settle(lim.RequestsPerMinute, lim.TokensPerMinute)
				memstore.ReleasePair(ks, wsh, ke, we)
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

package llmrate

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/llmrate/llmrate/internal/calendar"
	"github.com/llmrate/llmrate/internal/memstore"
)

// DefaultMaxKeys is the memory store's default bound on tracked entries, per
// kind (key entries and workspace entries are bounded separately). An entry
// costs about 73 bytes with its index (BENCHMARKS.md), so the bound caps
// the store near 77 MB in the default configuration (one entry per key) and
// near 154 MB with separate workspaces (two kinds at the bound), beyond
// which only entries in debt are kept (see MemoryStore, OverBound). With
// windows (Limits.Windows) a key costs 200 to 792 bytes, 2.8 to 11 times
// as much: near 210 to 830 MB at the bound (bench/memory-windows.txt).
// Windows that hold spend (rolling, calendar or session) are never
// evicted: past the bound they are kept beyond it, as debts are, so a
// flood of made-up keys that each spend once holds about 93 bytes per key
// per rolling window and 109 per calendar window
// (bench/quota-flood-memory.txt) until their windows refill or their
// periods end (a day for a daily window, a month for a monthly one).
const DefaultMaxKeys = 1 << 20

// MemoryStore is the default Store: per-process buckets in a sharded map,
// a lock per entry. Deciding on a known key allocates nothing and takes no
// shard-wide lock: decisions on different keys write no shared memory, so
// they scale with cores (BENCHMARKS.md).
//
// It keeps no raw key: entries are indexed by a per-store seeded 64-bit hash
// of the key and workspace (two distinct keys share buckets only on a hash
// collision, about 3e-8 for a million active keys, and an attacker cannot aim
// for one without the seed).
//
// Memory tracks active keys only: an entry is dropped once time alone would
// have refilled it to full under the figures of its latest admission or
// reconcile (refused admissions included), which loses nothing (it comes
// back full). If a key flood fills the store to its bound (WithMaxKeys) with
// entries that are not yet full, the least recently used of a small sample
// of entries not in debt is dropped to make room: that key's next request
// then finds a full bucket. Recency is counted in entries added to the
// shard (one of 128): entries last used between the same two additions are
// equally recent, and the first of them sampled goes. Such lossy evictions
// are counted (Evictions) and reported to the observer of every limiter
// using the store (NotifyEvictions).
//
// A debt is never forgotten: an entry in debt (a bucket below zero after its
// latest admission or reconcile) is dropped only once time alone has
// refilled it. When every candidate for eviction is in debt, the store adds
// the new entry beyond its bound instead (counted by OverBound); the excess
// goes as the debts refill. The only exception is a shard's hard limit of
// 16,777,214 entries (about 2.1 billion in the store), where the least
// recently used entry is dropped whatever it owes (a lossy eviction).
//
// An entry that only copies what another store reported (Follow), nothing
// spent here since, is dropped first when room is needed, in debt or not,
// and without counting: that store holds it.
//
// Windows (Limits.Windows) are kept per key, and per workspace, apart from
// the entries: a key's windows are dropped once time alone has refilled
// them (a daily window: up to a day after its last use), and a calendar
// or session window once its period (or session) holding spend has ended.
// A window holding spend is never evicted, in debt or not: a window spent
// to 0 is a quota held against its key, and dropping it would give the
// quota back (a key flood must not refund a day). At the WithMaxKeys bound
// the store keeps them beyond it instead (counted in OverBound); the excess
// goes as the windows refill and the periods end. A limiter without
// windows never creates any.
type MemoryStore struct {
	t   memstore.Tables                        // entries, gauges, windows (internal/memstore)
	err error                                  // an invalid option, reported by Err
	ids atomic.Pointer[memstore.IDs[Decision]] // identities seen (memidentity.go); nil until one is
}

// The store's tables, under the names its decisions use: the machinery
// lives in internal/memstore, which knows figures only as numbers; the
// decisions here (this file, memwindow.go, memquota.go) read the contract's
// types (AdmitRequest, Limits, Window) and answer a Decision.
type (
	entry       = memstore.Entry
	memShard    = memstore.Shard
	bucket      = memstore.Bucket
	evicted     = memstore.Evicted
	heldSlots   = memstore.HeldSlots
	winSet      = memstore.WinSet
	quotaSet    = memstore.QuotaSet
	quotaBucket = memstore.QuotaBucket
)

// perMinute is l's per-minute figures, as an entry keeps them.
func perMinute(l *Limits) memstore.Figures {
	return memstore.Figures{Requests: l.RequestsPerMinute, Tokens: l.TokensPerMinute}
}

// exactLevels is ModelLevels with each bucket's fraction.
func (s *MemoryStore) exactLevels(key, workspace, model string, kl, wl Limits, now time.Time) [4]bucket {
	return s.t.Levels(key, workspace, model, perMinute(&kl), perMinute(&wl), now)
}

// winSetOf returns the window set of entry hash h in sh (created when
// windows has any: memstore.Shard.NewWinSet), an admission's buckets
// advanced to the figures of at (nil for a reconcile: memstore.WinSet.Advance).
func winSetOf(sh *memShard, bound int, h uint64, windows, at []Window, now, last int64, ev *evicted) *winSet {
	ws := sh.WinSetAt(h)
	if ws == nil {
		if len(windows) == 0 {
			return nil
		}
		return sh.NewWinSet(bound, h, now, last, ev)
	}
	if len(at) == 0 {
		ws.Advance(now, nil)
		return ws
	}
	var buf [2 * MaxWindows]memstore.WinFigures
	figs := buf[:0]
	for i := range at {
		w := &at[i]
		figs = append(figs, memstore.WinFigures{Per: int64(w.Per), Figs: [4]int64{w.Requests, w.Tokens, w.InputTokens, w.OutputTokens}})
	}
	ws.Advance(now, figs)
	return ws
}

// quotaSetOf returns the quota set of entry hash h in sh, its clock at
// least now, created when windows holds a calendar or session window
// (memstore.Shard.NewQuotaSet).
func quotaSetOf(sh *memShard, bound int, h uint64, windows []Window, now int64, ev *evicted) *quotaSet {
	if qs := sh.QuotaSetAt(h); qs != nil {
		qs.Last = max(qs.Last, now)
		return qs
	}
	if !hasQuota(windows) {
		return nil
	}
	return sh.NewQuotaSet(bound, h, now, ev)
}

// quotaID is calendar or session window w's identity in a quota set.
func quotaID(w *Window) memstore.QuotaID {
	return memstore.QuotaID{Cal: calendar.Kind(w.Calendar), Session: w.Session, Per: int64(w.Per), Zone: zoneName(w.Zone)}
}

// quotaIDOf is quotaID for a calendar or session window, the zero
// QuotaID for a rolling one: a decision's loops over a window's meters
// take it once per window.
func quotaIDOf(w *Window) memstore.QuotaID {
	if !isQuota(*w) {
		return memstore.QuotaID{}
	}
	return quotaID(w)
}

// gaugeCheck is what decide needs to know of the gauges in force: each
// figure (0: no cap) and the slots held now; with a priority reserve
// (AdmitRequest.Reserve), the slots each gauge keeps free for other
// traffic (its floor; set by decideStages' callers through withReserve).
type gaugeCheck struct {
	keyCap, keyNow, wsCap, wsNow int64
	keyFloor, wsFloor            int64
}

// full returns the first gauge without a free slot above its floor.
func (g *gaugeCheck) full() (Bucket, bool) {
	switch {
	case g.keyCap > 0 && g.keyNow+g.keyFloor >= g.keyCap:
		return KeyConcurrent, true
	case g.wsCap > 0 && g.wsNow+g.wsFloor >= g.wsCap:
		return WorkspaceConcurrent, true
	}
	return 0, false
}

// byReserve reports whether gauge b, which full named, has a free slot all
// the same: only its floor kept the request out.
func (g *gaugeCheck) byReserve(b Bucket) bool {
	if b == KeyConcurrent {
		return g.keyNow < g.keyCap
	}
	return g.wsNow < g.wsCap
}

// withReserve sets the gauges' floors, if g is not nil, for a reserve of r
// millionths (above MaxReserve: MaxReserve): ⌈r × figure⌉ slots kept free
// after the request takes its own.
func (g *gaugeCheck) withReserve(r int64) {
	if g != nil {
		g.keyFloor, g.wsFloor = ReserveFloor(r, g.keyCap), ReserveFloor(r, g.wsCap)
	}
}

// MemoryOption configures a MemoryStore. Options only record values;
// NewMemoryStore validates them (see Err).
type MemoryOption interface{ applyMemory(*memoryConfig) }

type memoryConfig struct {
	maxKeys int
	errs    []error
}

type memoryOptionFunc func(*memoryConfig)

func (f memoryOptionFunc) applyMemory(c *memoryConfig) { f(c) }

// WithMaxKeys bounds the number of key entries, and separately of workspace
// entries, the store tracks. Default: DefaultMaxKeys. n must be positive.
// Entries in debt are never dropped to keep the bound: when every
// candidate for eviction is in debt, the store goes beyond it (counted by
// OverBound) and comes back as the debts refill. Windows holding spend
// (Limits.Windows: rolling, calendar or session) are kept so too, never
// evicted: a key flood never gives back a spent quota, and costs the
// memory DefaultMaxKeys states per flooding key for as long as its windows
// hold spend.
// The bound is split evenly over the store's 128 shards (rounded down, at
// least one entry and at most 16,777,214 per shard: about 2.1 billion in
// all).
func WithMaxKeys(n int) MemoryOption {
	return memoryOptionFunc(func(c *memoryConfig) {
		if n <= 0 {
			c.errs = append(c.errs, &ConfigError{Option: "WithMaxKeys", Err: fmt.Errorf("%d entries: must be positive", n)})
			return
		}
		c.maxKeys = n
	})
}

// NewMemoryStore returns an empty in-memory store. It cannot return an
// error: an invalid option is kept and reported by Err, New refuses the
// store (WithStore) with that *ConfigError, and until then the store runs
// with the option's default.
func NewMemoryStore(opts ...MemoryOption) *MemoryStore {
	c := memoryConfig{maxKeys: DefaultMaxKeys}
	nils := 0
	for _, o := range opts {
		if o == nil {
			nils++
			continue
		}
		o.applyMemory(&c)
	}
	if nils > 0 {
		c.errs = append(c.errs, &ConfigError{Option: "MemoryOption", Err: errors.New("nil option")})
	}
	s := &MemoryStore{err: errors.Join(c.errs...)}
	s.t.Init(c.maxKeys)
	return s
}

// Err returns the store's invalid options as *ConfigErrors (joined when
// several), or nil when every option was valid.
func (s *MemoryStore) Err() error { return s.err }

// NotifyEvictions implements EvictionNotifier.
func (s *MemoryStore) NotifyEvictions(o Observer) (stop func()) {
	if o == nil {
		return func() {}
	}
	return s.t.Subscribe(o)
}

var _ Store = (*MemoryStore)(nil)

// Evictions returns how many entries were dropped before they were full
// because the store was at its WithMaxKeys bound.
func (s *MemoryStore) Evictions() int64 { return s.t.Evictions() }

// OverBound returns how many entries were added beyond the WithMaxKeys
// bound because every candidate for eviction was in debt: the store keeps
// a debt rather than forget it, and goes back to its bound as the debts
// refill.
func (s *MemoryStore) OverBound() int64 { return s.t.OverBound() }

// Len returns the number of key entries and workspace entries held.
func (s *MemoryStore) Len() (keys, workspaces int) { return s.t.Len() }

// ErrNoAdmissionID is the error of an admission under a gauge
// (Limits.ConcurrentRequests > 0) without an AdmitRequest.ID: its slots
// could never be released. The limiter always sets one.
var ErrNoAdmissionID = errors.New("llmrate: an admission under a concurrency limit needs an ID")

// errHeldID is the error of an admission whose ID already holds slots.
var errHeldID = errors.New("llmrate: this admission ID already holds concurrency slots")

// Admit implements Store (and QuotaStore: see memquota.go). An admission
// with an ID already admitted (within five seconds of its clock) gets that
// first decision and debits nothing.
// Gauges and reservations are described on Store and AdmitRequest.MaxWait;
// a slot is released by the admission's Reconcile. A priority reserve
// (AdmitRequest.Reserve) above MaxReserve is decided as MaxReserve.
func (s *MemoryStore) Admit(_ context.Context, r AdmitRequest) (Decision, error) {
	if r.ID != "" {
		return s.admitOnce(&r)
	}
	if windowed(r.KeyLimits, r.WorkspaceLimits) {
		if mayQuota(&r) || hasQuota(r.KeyLimits.Windows) || hasQuota(r.WorkspaceLimits.Windows) {
			return s.admitQuota(r)
		}
		return s.admitWindowed(&r, nil) // an ID under a gauge: ErrNoAdmissionID
	}
	if plain(&r) {
		return s.admit(&r), nil
	}
	if mayQuota(&r) {
		return s.admitQuota(r)
	}
	if r.KeyLimits.ConcurrentRequests > 0 || r.WorkspaceLimits.ConcurrentRequests > 0 {
		return Decision{}, ErrNoAdmissionID
	}
	if r.Reserve > 0 {
		return s.admitReserved(r)
	}
	return s.admit(&r), nil
}

// admitAny is admit, or admitWindowed with windows, or admitReserved with
// a priority reserve (AdmitRequest.Reserve: its floors are decided as a
// window's stages are), or admitGauged under a gauge.
func (s *MemoryStore) admitAny(r *AdmitRequest) (Decision, error) {
	if windowed(r.KeyLimits, r.WorkspaceLimits) {
		if mayQuota(r) || hasQuota(r.KeyLimits.Windows) || hasQuota(r.WorkspaceLimits.Windows) {
			return s.admitQuota(*r)
		}
		return s.admitWindowed(r, nil)
	}
	if plain(r) {
		return s.admit(r), nil
	}
	if mayQuota(r) {
		return s.admitQuota(*r)
	}
	if r.Reserve > 0 {
		return s.admitReserved(*r)
	}
	if r.KeyLimits.ConcurrentRequests > 0 || r.WorkspaceLimits.ConcurrentRequests > 0 {
		return s.admitGauged(*r)
	}
	return s.admit(r), nil
}

// plain reports, for a request without windows, that it has no gauge, no
// reserve and no quota (mayQuota): admit decides it. One test of a few
// words' bits, so that the commonest admission pays no more for the
// features it does not use.
func plain(r *AdmitRequest) bool {
	return r.KeyLimits.ConcurrentRequests|r.WorkspaceLimits.ConcurrentRequests|r.Reserve == 0 &&
		r.KeyPlan == nil && r.WorkspacePlan == nil &&
		r.KeyLimits.RequestsPerMinute|r.KeyLimits.TokensPerMinute|r.WorkspaceLimits.RequestsPerMinute|r.WorkspaceLimits.TokensPerMinute >= 0
}

func (s *MemoryStore) admit(r *AdmitRequest) Decision {
	now := r.Now.UnixNano()
	if r.Solo {
		sh, e, ev := s.t.SoloEntry(s.t.WorkspaceHash(r.Workspace, r.Model), perMinute(&r.WorkspaceLimits), now)
		d := decideSolo(e, &r.WorkspaceLimits, r.Tokens, r.MaxWait, nil)
		e.Settle(r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute)
		e.Release(sh.Epoch())
		s.t.Note(ev)
		return d
	}
	pk, wh := s.t.Hashes(r.Key, r.Workspace, r.Model)
	ks, wsh, ke, we, ev := s.t.Pair(pk, wh, perMinute(&r.KeyLimits), perMinute(&r.WorkspaceLimits), now)
	d := decide(&ke.Req, &ke.Tok, &we.Req, &we.Tok, &r.KeyLimits, &r.WorkspaceLimits, r.Tokens, r.MaxWait, nil)
	ke.Settle(r.KeyLimits.RequestsPerMinute, r.KeyLimits.TokensPerMinute)
	we.Settle(r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute)
	memstore.ReleasePair(ks, wsh, ke, we)
	s.t.Note(ev)
	return d
}

// admitGauged is Admit under a gauge: the admission also takes a slot of
// each gauge in force, recorded under its ID in the shard that keeps the
// key's gauge (the workspace's for a Solo request). Kept apart so that an
// admission without gauges costs what it did before gauges existed.
func (s *MemoryStore) admitGauged(r AdmitRequest) (Decision, error) {
	now := r.Now.UnixNano()
	if r.Solo {
		wh := s.t.WorkspaceHash(r.Workspace, r.Model)
		sh, e, ev := s.t.Solo(wh, perMinute(&r.WorkspaceLimits), now)
		if sh.Holds(r.ID) {
			e.Release(sh.Epoch())
			sh.Mu.Unlock()
			s.t.Note(ev)
			return Decision{}, errHeldID
		}
		g := gaugeCheck{keyCap: r.WorkspaceLimits.ConcurrentRequests, keyNow: sh.InFlight(wh)}
		d := decideSolo(e, &r.WorkspaceLimits, r.Tokens, r.MaxWait, &g)
		if d.Allowed {
			sh.Take(wh)
			sh.Hold(r.ID, heldSlots{Key: wh, HaveKey: true})
		}
		e.Settle(r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute)
		e.Release(sh.Epoch())
		sh.Mu.Unlock()
		s.t.Note(ev)
		return d, nil
	}
	kc, wc := max(0, r.KeyLimits.ConcurrentRequests), max(0, r.WorkspaceLimits.ConcurrentRequests)
	pk, wh := s.t.Hashes(r.Key, r.Workspace, r.Model)
	ks, wsh, ke, we, ev := s.t.Lock(pk, wh, perMinute(&r.KeyLimits), perMinute(&r.WorkspaceLimits), now)
	if ks.Holds(r.ID) {
		memstore.ReleasePair(ks, wsh, ke, we)
		wsh.Mu.Unlock()
		ks.Mu.Unlock()
		s.t.Note(ev)
		return Decision{}, errHeldID
	}
	g := gaugeCheck{keyCap: kc, keyNow: ks.InFlight(pk), wsCap: wc, wsNow: wsh.InFlight(wh)}
	d := decide(&ke.Req, &ke.Tok, &we.Req, &we.Tok, &r.KeyLimits, &r.WorkspaceLimits, r.Tokens, r.MaxWait, &g)
	if d.Allowed {
		holdSlots(ks, wsh, r.ID, pk, wh, kc, wc)
	}
	ke.Settle(r.KeyLimits.RequestsPerMinute, r.KeyLimits.TokensPerMinute)
	we.Settle(r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute)
	memstore.ReleasePair(ks, wsh, ke, we)
	wsh.Mu.Unlock()
	ks.Mu.Unlock()
	s.t.Note(ev)
	return d, nil
}

// Reconcile implements Store. A reconcile with an ID is applied at most
// once (within thirty seconds of its clock). It also releases the gauge
// slots that the admission with r.ID took, if it still holds any.
func (s *MemoryStore) Reconcile(_ context.Context, r ReconcileRequest) error {
	if r.ID != "" {
		s.reconcileOnce(&r)
		return nil
	}
	s.reconcile(&r)
	return nil
}

func (s *MemoryStore) reconcile(r *ReconcileRequest) {
	if windowed(r.KeyLimits, r.WorkspaceLimits) {
		if mayQuotaReconcile(r) || hasQuota(r.KeyLimits.Windows) || hasQuota(r.WorkspaceLimits.Windows) {
			s.reconcileQuota(*r)
		} else {
			s.reconcileWindowed(*r)
		}
		return
	}
	if mayQuotaReconcile(r) {
		s.reconcileQuota(*r)
		return
	}
	now := r.Now.UnixNano()
	if r.ID == "" {
		// No gauge slots to release: the entries' locks are enough.
		if r.Solo {
			sh, e, ev := s.t.SoloEntry(s.t.WorkspaceHash(r.Workspace, r.Model), perMinute(&r.WorkspaceLimits), now)
			reconcileEntry(e, r, WorkspaceTokens, r.WorkspaceLimits)
			e.Settle(r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute)
			e.Release(sh.Epoch())
			s.t.Note(ev)
			return
		}
		pk, wh := s.t.Hashes(r.Key, r.Workspace, r.Model)
		ks, wsh, ke, we, ev := s.t.Pair(pk, wh, perMinute(&r.KeyLimits), perMinute(&r.WorkspaceLimits), now)
		reconcileEntry(ke, r, KeyTokens, r.KeyLimits)
		reconcileEntry(we, r, WorkspaceTokens, r.WorkspaceLimits)
		ke.Settle(r.KeyLimits.RequestsPerMinute, r.KeyLimits.TokensPerMinute)
		we.Settle(r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute)
		memstore.ReleasePair(ks, wsh, ke, we)
		s.t.Note(ev)
		return
	}
	if r.Solo {
		sh, e, ev := s.t.Solo(s.t.WorkspaceHash(r.Workspace, r.Model), perMinute(&r.WorkspaceLimits), now)
		reconcileEntry(e, r, WorkspaceTokens, r.WorkspaceLimits)
		e.Settle(r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute)
		e.Release(sh.Epoch())
		if hs, ok := sh.Unhold(r.ID); ok {
			sh.Give(hs.Key)
		}
		sh.Mu.Unlock()
		s.t.Note(ev)
		return
	}
	pk, wh := s.t.Hashes(r.Key, r.Workspace, r.Model)
	ks, wsh, ke, we, ev := s.t.Lock(pk, wh, perMinute(&r.KeyLimits), perMinute(&r.WorkspaceLimits), now)
	reconcileEntry(ke, r, KeyTokens, r.KeyLimits)
	reconcileEntry(we, r, WorkspaceTokens, r.WorkspaceLimits)
	ke.Settle(r.KeyLimits.RequestsPerMinute, r.KeyLimits.TokensPerMinute)
	we.Settle(r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute)
	memstore.ReleasePair(ks, wsh, ke, we)
	releaseSlots(ks, wsh, r.ID)
	wsh.Mu.Unlock()
	ks.Mu.Unlock()
	s.t.Note(ev)
}

// holdSlots takes, for admission id, a slot of the key's gauge pk in its
// shard ks if kc > 0 and of the workspace's gauge wh in wsh if wc > 0 (the
// caller holds both shards), recorded in ks for releaseSlots.
func holdSlots(ks, wsh *memShard, id string, pk, wh uint64, kc, wc int64) {
	hs := heldSlots{Key: pk, WS: wh, HaveKey: kc > 0, HaveWS: wc > 0}
	if hs.HaveKey {
		ks.Take(pk)
	}
	if hs.HaveWS {
		wsh.Take(wh)
	}
	ks.Hold(id, hs)
}

// releaseSlots gives back the gauge slots admission id holds in the key's
// shard ks and the workspace's shard wsh (both locked by the caller), once:
// a later call finds nothing held.
func releaseSlots(ks, wsh *memShard, id string) {
	if hs, ok := ks.Unhold(id); ok {
		if hs.HaveKey {
			ks.Give(hs.Key)
		}
		if hs.HaveWS {
			wsh.Give(hs.WS)
		}
	}
}

// reconcileEntry applies r to one entry's buckets (tok names its tokens
// bucket, lim its figures): a refund credits one request and the estimate back; a
// reconcile adds the bounded actual charge less the estimate to the tokens
// bucket.
func reconcileEntry(e *entry, r *ReconcileRequest, tok Bucket, lim Limits) {
	if r.Refund {
		e.Req.Adjust(-1, 2*lim.RequestsPerMinute)
		e.Tok.Adjust(-r.Estimate, 2*lim.TokensPerMinute)
		return
	}
	e.Tok.Adjust(r.BoundedActual(tok)-r.Estimate, 2*lim.TokensPerMinute)
}

// decide checks the four buckets in admission order, then the gauges (g;
// nil: none in force), and debits all four buckets only if all have room
// and every gauge a free slot; the caller takes the slots. With maxWait > 0
// a request that lacks room only in buckets that would have it within
// maxWait is debited all the same (a reservation: Wait says how long). It
// is shared by every in-process implementation, so the arithmetic lives in
// one place.
func decide(kr, kt, wr, wt *bucket, kl, wl *Limits, n int64, maxWait time.Duration, g *gaugeCheck) Decision {
	var d Decision
	switch {
	case kr.Level < 1:
		d.Refused = KeyRequests
	case kt.Level < n:
		d.Refused = KeyTokens
	case wr.Level < 1:
		d.Refused = WorkspaceRequests
	case wt.Level < n:
		d.Refused = WorkspaceTokens
	default:
		if g != nil {
			if b, full := g.full(); full {
				d.Refused, d.RetryAfter = b, time.Second
				d.Remaining = [4]int64{kr.Level, kt.Level, wr.Level, wt.Level}
				return d
			}
		}
		kr.Level--
		kt.Level -= n
		wr.Level--
		wt.Level -= n
		d.Allowed = true
		d.Remaining = [4]int64{kr.Level, kt.Level, wr.Level, wt.Level}
		return d
	}
	d.Remaining = [4]int64{kr.Level, kt.Level, wr.Level, wt.Level}
	for i, b := range [4]*bucket{kr, kt, wr, wt} {
		need, rate := int64(1), Bucket(i).PerMinute(*kl, *wl)
		if Bucket(i).Tokens() {
			need = n
		}
		w, never := b.Wait(need, rate, 2*rate, waitLimit)
		d.RetryAfter = max(d.RetryAfter, w)
		d.NeverFits = d.NeverFits || never
	}
	if reserve(&d, maxWait, g) {
		kr.Level--
		kt.Level -= n
		wr.Level--
		wt.Level -= n
		d.Remaining = [4]int64{kr.Level, kt.Level, wr.Level, wt.Level}
	}
	return d
}

// waitLimit bounds the waits decide computes: just past MaxRetryAfter, so
// that a wait longer than every MaxWait allowed is told from one of exactly
// MaxRetryAfter.
const waitLimit = MaxRetryAfter + 1

// reserve finishes a refusal whose d.RetryAfter is the exact time until the
// request fits every bucket (up to waitLimit): it turns it into a
// reservation, returning true (the caller debits), when that time is within
// maxWait and every gauge has a free slot; else it leaves d a refusal with
// RetryAfter clamped to MaxRetryAfter (at least a second when a gauge
// refused).
func reserve(d *Decision, maxWait time.Duration, g *gaugeCheck) bool {
	if maxWait <= 0 || d.NeverFits || d.RetryAfter > maxWait {
		d.RetryAfter = min(d.RetryAfter, MaxRetryAfter)
		return false
	}
	if g != nil {
		if b, full := g.full(); full {
			d.Refused, d.RetryAfter = b, max(d.RetryAfter, time.Second)
			return false
		}
	}
	d.Allowed, d.Refused, d.Wait, d.RetryAfter = true, 0, d.RetryAfter, 0
	return true
}

// decideSolo is decide for a Solo request: the key's buckets and the
// workspace's are the same two buckets, so the key stage decides; its one
// gauge is g's key gauge.
func decideSolo(e *entry, lim *Limits, n int64, maxWait time.Duration, g *gaugeCheck) Decision {
	var d Decision
	switch {
	case e.Req.Level < 1:
		d.Refused = KeyRequests
	case e.Tok.Level < n:
		d.Refused = KeyTokens
	default:
		if g != nil {
			if b, full := g.full(); full {
				d.Refused, d.RetryAfter = b, time.Second
				d.Remaining = [4]int64{e.Req.Level, e.Tok.Level, e.Req.Level, e.Tok.Level}
				return d
			}
		}
		e.Req.Level--
		e.Tok.Level -= n
		d.Allowed = true
		d.Remaining = [4]int64{e.Req.Level, e.Tok.Level, e.Req.Level, e.Tok.Level}
		return d
	}
	d.Remaining = [4]int64{e.Req.Level, e.Tok.Level, e.Req.Level, e.Tok.Level}
	w1, n1 := e.Req.Wait(1, lim.RequestsPerMinute, 2*lim.RequestsPerMinute, waitLimit)
	w2, n2 := e.Tok.Wait(n, lim.TokensPerMinute, 2*lim.TokensPerMinute, waitLimit)
	d.RetryAfter, d.NeverFits = max(w1, w2), n1 || n2
	if reserve(&d, maxWait, g) {
		e.Req.Level--
		e.Tok.Level -= n
		d.Remaining = [4]int64{e.Req.Level, e.Tok.Level, e.Req.Level, e.Tok.Level}
	}
	return d
}

// Follow lowers the four per-minute buckets r would spend, as of r.Now,
// to at most the levels d reports (Decision.Remaining): a bucket above its
// reported level is set to it, one at or below keeps its own. It is for a
// store that keeps a MemoryStore as its fallback (as redisstore's
// WithFallbackLocal does): fed each decision of the shared store, the
// fallback, when a call to the shared store fails, decides from what that
// store last reported, refilled since, instead of from full buckets, and
// does not admit what the shared buckets had already spent. Taking the
// lower of the two keeps what the fallback itself admitted while the
// shared store was out of reach, as long as the shared store reports no
// more than that (the larger of the two spends is kept, not their sum:
// the caller charges the fallback's admissions to the shared store, as
// redisstore does, for the sum). A level below the memory store's debt
// floor (−2 × capacity) is taken at the floor. Calendar and session
// windows (the plan's lent ones included) are followed too: each takes the
// larger of its own spend and the one d reports (Decision.KeyWindows...,
// with WindowLevels.Reset naming the period or session), so that an outage
// never gives a spent quota back. Rolling windows and gauges are not
// followed; an entry not tracked yet is created, full, then lowered. An
// entry Follow set, until this store spends on it, is a copy: it goes
// first when room is needed, without counting as an eviction, debt or not
// (see MemoryStore).
func (s *MemoryStore) Follow(r AdmitRequest, d Decision) {
	now := r.Now.UnixNano()
	kl, wl := r.KeyLimits, r.WorkspaceLimits
	quota := quotaRequest(&r)
	if quota {
		// An Unlimited bucket is kept full (entryLimits): a reported 0 is
		// no level to follow.
		kl, wl = entryLimits(kl), entryLimits(wl)
		for i, f := range [4]int64{r.KeyLimits.RequestsPerMinute, r.KeyLimits.TokensPerMinute, r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute} {
			if f == Unlimited {
				d.Remaining[i] = 2 * MaxPerMinute
			}
		}
	}
	if r.Solo {
		sh, e, ev := s.t.SoloEntry(s.t.WorkspaceHash(r.Workspace, r.Model), perMinute(&wl), now)
		e.Lower(d.Remaining[WorkspaceRequests], d.Remaining[WorkspaceTokens], wl.RequestsPerMinute, wl.TokensPerMinute)
		e.Release(sh.Epoch())
		s.t.Note(ev)
		if quota {
			s.followQuotas(&r, &d)
		}
		return
	}
	pk, wh := s.t.Hashes(r.Key, r.Workspace, r.Model)
	ks, wsh, ke, we, ev := s.t.Pair(pk, wh, perMinute(&kl), perMinute(&wl), now)
	ke.Lower(d.Remaining[KeyRequests], d.Remaining[KeyTokens], kl.RequestsPerMinute, kl.TokensPerMinute)
	we.Lower(d.Remaining[WorkspaceRequests], d.Remaining[WorkspaceTokens], wl.RequestsPerMinute, wl.TokensPerMinute)
	memstore.ReleasePair(ks, wsh, ke, we)
	s.t.Note(ev)
	if quota {
		s.followQuotas(&r, &d)
	}
}

// Levels returns the whole-unit level of the four default buckets of (key,
// workspace) as of now under the given figures, indexed by Bucket, without
// changing anything. Buckets not tracked are full at their figures. A Solo
// key (its own workspace, kept once as its workspace's entry) reports that
// entry for both scopes; a key named like its workspace that was admitted
// without Solo, or never, reports its own buckets.
//
// Levels is shorthand for ModelLevels(key, workspace, "", kl, wl, now).
func (s *MemoryStore) Levels(key, workspace string, kl, wl Limits, now time.Time) [4]int64 {
	return s.ModelLevels(key, workspace, "", kl, wl, now)
}

// ModelLevels is Levels for the buckets of a ModelLimits entry (model is
// the entry's name as configured, e.g. "gpt-4o*"; "" for the default
// buckets).
func (s *MemoryStore) ModelLevels(key, workspace, model string, kl, wl Limits, now time.Time) [4]int64 {
	b := s.exactLevels(key, workspace, model, kl, wl, now)
	return [4]int64{b[KeyRequests].Level, b[KeyTokens].Level, b[WorkspaceRequests].Level, b[WorkspaceTokens].Level}
}

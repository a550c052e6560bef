package llmrate

import (
	"context"
	"github.com/llmrate/llmrate/internal/memstore"
	"math"
	"time"
	"unsafe"

	"github.com/llmrate/llmrate/internal/calendar"
)

// Quotas implements QuotaStore.
func (*MemoryStore) Quotas() {}

var (
	_ QuotaStore = (*MemoryStore)(nil)
	_ Peeker     = (*MemoryStore)(nil)
)

// The memory store's side of plans and quotas (QuotaStore): Unlimited
// per-minute figures, calendar and session windows, and the plan's windows
// and gauges lent to a model entry's request (AdmitRequest.KeyPlan,
// WorkspacePlan). A request that needs none of them never comes here, so
// its decision costs what it did before quotas existed (mayQuota and hasQuota
// are a few comparisons); one that does takes this locked path, which also
// decides its rolling windows, per-minute buckets, gauges and reserve in
// the same step.
//
// isQuota reports whether w is a calendar or a session window.
func isQuota(w Window) bool { return w.Calendar != NoCalendar || w.Session }

// hasQuota reports whether any of ws is a calendar or a session window.
func hasQuota(ws []Window) bool {
	for _, w := range ws {
		if isQuota(w) {
			return true
		}
	}
	return false
}

// lends reports whether a plan's figures lend anything to an entry's
// request: windows or a gauge (its per-minute figures are not read).
func lends(l *Limits) bool { return l != nil && (len(l.Windows) > 0 || l.ConcurrentRequests > 0) }

// planOf is the lent figures p points to (none when nil).
func planOf(p *Limits) Limits {
	if p == nil {
		return Limits{}
	}
	return *p
}

// unlimited reports whether l has an Unlimited per-minute figure.
func unlimited(l *Limits) bool {
	return l.RequestsPerMinute == Unlimited || l.TokensPerMinute == Unlimited
}

// mayQuota reports whether r has lent figures (AdmitRequest.KeyPlan, set
// for a model entry's request only) or an Unlimited figure: with
// hasQuota over its windows, whether it takes the quota path (which
// decides any request; this test costs a few instructions, so that a
// request without quotas costs what it did before them).
func mayQuota(r *AdmitRequest) bool {
	return r.KeyPlan != nil || r.WorkspacePlan != nil ||
		r.KeyLimits.RequestsPerMinute|r.KeyLimits.TokensPerMinute|r.WorkspaceLimits.RequestsPerMinute|r.WorkspaceLimits.TokensPerMinute < 0
}

// mayQuotaReconcile is mayQuota for a reconcile.
func mayQuotaReconcile(r *ReconcileRequest) bool {
	return r.KeyPlan != nil || r.WorkspacePlan != nil ||
		r.KeyLimits.RequestsPerMinute|r.KeyLimits.TokensPerMinute|r.WorkspaceLimits.RequestsPerMinute|r.WorkspaceLimits.TokensPerMinute < 0
}

// quotaRequest reports whether an admission has quotas (Follow).
func quotaRequest(r *AdmitRequest) bool {
	return unlimited(&r.KeyLimits) || unlimited(&r.WorkspaceLimits) ||
		r.Model != "" && (lends(r.KeyPlan) || lends(r.WorkspacePlan)) ||
		hasQuota(r.KeyLimits.Windows) || hasQuota(r.WorkspaceLimits.Windows)
}

// entryLimits is l as an entry's two buckets are kept: an Unlimited figure
// as MaxPerMinute (such a bucket is never checked nor debited, so it stays
// full and the entry is dropped as any full one; a figure that becomes
// limited again finds it full).
func entryLimits(l Limits) Limits {
	if l.RequestsPerMinute == Unlimited {
		l.RequestsPerMinute = MaxPerMinute
	}
	if l.TokensPerMinute == Unlimited {
		l.TokensPerMinute = MaxPerMinute
	}
	return l
}

// qStage is one bucket of a quota-path decision: a per-minute or rolling
// window bucket (b), or a calendar or session bucket (q).
type qStage struct {
	b           *bucket
	q           *quotaBucket
	w           *Window // nil: a per-minute bucket
	need, debit int64   // need includes a priority reserve's floor
	floor       int64
	rate, cap   int64
	period      uint64
	bucket      Bucket
	lent        bool
	level       *int64        // a per-minute bucket's Remaining slot
	levels      *WindowLevels // a window's levels
}

// have is the stage's level now.
func (st *qStage) have() int64 {
	if st.q != nil {
		return st.cap - st.q.Spent
	}
	return st.b.Level
}

// wait is the stage's exact time until it holds need, capped (a per-minute
// bucket at MaxRetryAfter, a rolling window at its Per when longer; a
// calendar or session bucket is not capped: its period's end), with the
// uncapped wait (beyond the cap: the cap and a nanosecond) and never.
func (st *qStage) wait(now int64) (capped, exact time.Duration, never bool) {
	if st.q != nil {
		switch {
		case st.need > st.cap:
			return 0, 0, true
		case st.have() >= st.need:
			return 0, 0, false
		}
		d := time.Duration(st.q.End - now)
		return d, d, false
	}
	c := max(MaxRetryAfter, time.Duration(st.period))
	w, never := st.b.PWait(st.need, st.rate, st.cap, c+1, st.period)
	return min(w, c), w, never
}

// shardSet is the shards one quota-path call holds locked.
type shardSet struct {
	held [4]*memShard
	n    int
}

// lock locks each distinct shard of a call (at most two of each class):
// the key shards in index order, then the workspace shards in index order
// (the order shardState describes; a call locking one shard of each
// class, as every other path does, is a special case).
func (ss *shardSet) lock(keys, wss [2]*memShard) {
	for _, group := range [2][2]*memShard{keys, wss} {
		sortShards(&group)
		var prev *memShard
		for _, sh := range group {
			if sh != nil && sh != prev {
				sh.Mu.Lock()
				ss.held[ss.n] = sh
				ss.n++
			}
			prev = sh
		}
	}
}

// unlock releases the shards, in the reverse order.
func (ss *shardSet) unlock() {
	for i := ss.n - 1; i >= 0; i-- {
		ss.held[i].Mu.Unlock()
	}
}

// sortShards orders two shards (nil last) by address (within a class the
// shards are one array: address order is index order).
func sortShards(sh *[2]*memShard) {
	if sh[1] != nil && (sh[0] == nil || uintptrOf(sh[1]) < uintptrOf(sh[0])) {
		sh[0], sh[1] = sh[1], sh[0]
	}
}

func uintptrOf(sh *memShard) uintptr { return uintptr(unsafe.Pointer(sh)) }

// quotaCall is one locked quota-path call's state.
type quotaCall struct {
	s        *MemoryStore
	now      int64
	solo     bool
	pk, wh   uint64 // the entry's hashes (wh alone for a Solo request)
	pk0, wh0 uint64 // the default buckets' hashes (lent figures)
	lent     bool
	ks, wsh  *memShard
	ks0, ws0 *memShard
	ke, we   *entry // we nil for a Solo request (ke is its one entry)
	kl, wl   Limits // the entries' figures (entryLimits)
	shards   shardSet
	ev       evicted
	// The window sets fetched (sets), settled by done.
	wsets [4]*winSet
	qsets [4]*quotaSet
	nsets int
}

// lockQuota locks what a call on (key, workspace, model) touches: the
// entry's shards and entries (created full if absent, advanced to now)
// and, when lent, the default buckets' shards.
func (s *MemoryStore) lockQuota(c *quotaCall, key, workspace, model string, kl, wl Limits, solo, lent bool, now int64) {
	*c = quotaCall{s: s, now: now, solo: solo, lent: lent && model != ""}
	if solo {
		c.wh = s.t.WorkspaceHash(workspace, model)
		c.wsh = s.t.WorkspaceShard(c.wh)
		c.kl = entryLimits(wl)
		wss := [2]*memShard{c.wsh}
		if c.lent {
			c.wh0 = s.t.WorkspaceHash(workspace, "")
			c.ws0 = s.t.WorkspaceShard(c.wh0)
			wss[1] = c.ws0
		}
		c.shards.lock([2]*memShard{}, wss)
		c.ke = c.wsh.GetEntry(s.t.Bound(), c.wh, c.kl.RequestsPerMinute, c.kl.TokensPerMinute, now, &c.ev)
		c.ke.Advance(now, c.kl.RequestsPerMinute, c.kl.TokensPerMinute)
		c.ke.SetSolo(true)
		return
	}
	c.pk, c.wh = s.t.Hashes(key, workspace, model)
	c.ks, c.wsh = s.t.Shards(c.pk, c.wh)
	c.kl, c.wl = entryLimits(kl), entryLimits(wl)
	keys, wss := [2]*memShard{c.ks}, [2]*memShard{c.wsh}
	if c.lent {
		c.pk0, c.wh0 = s.t.Hashes(key, workspace, "")
		c.ks0, c.ws0 = s.t.Shards(c.pk0, c.wh0)
		keys[1], wss[1] = c.ks0, c.ws0
	}
	c.shards.lock(keys, wss)
	c.ke = c.ks.GetEntry(s.t.Bound(), c.pk, c.kl.RequestsPerMinute, c.kl.TokensPerMinute, now, &c.ev)
	c.we = c.wsh.GetEntry(s.t.Bound(), c.wh, c.wl.RequestsPerMinute, c.wl.TokensPerMinute, now, &c.ev)
	c.ke.Advance(now, c.kl.RequestsPerMinute, c.kl.TokensPerMinute)
	c.we.Advance(now, c.wl.RequestsPerMinute, c.wl.TokensPerMinute)
	c.we.SetSolo(false)
}

// done settles the window sets fetched and the entries, releases
// everything and counts evictions.
func (c *quotaCall) done() {
	for i := range c.nsets {
		c.wsets[i].Settle(4 * MaxWindow)
		c.qsets[i].Settle()
	}
	if c.solo {
		c.ke.Settle(c.kl.RequestsPerMinute, c.kl.TokensPerMinute)
		c.ke.Release(c.wsh.Epoch())
	} else {
		c.ke.Settle(c.kl.RequestsPerMinute, c.kl.TokensPerMinute)
		c.we.Settle(c.wl.RequestsPerMinute, c.wl.TokensPerMinute)
		memstore.ReleasePair(c.ks, c.wsh, c.ke, c.we)
	}
	c.shards.unlock()
	c.s.t.Note(c.ev)
}

// sets returns the rolling window set and the quota set of hash h in sh
// for windows (nil when absent and not needed), an admission's rolling
// buckets advanced to now.
//
// A call may fetch up to four sets from one shard (a plan's and an
// entry's, of either scope): until the caller settles them, each set
// fetched is marked so that fetching the next can neither sweep it (as
// full) nor evict it (as not in debt).
func (c *quotaCall) sets(sh *memShard, h uint64, windows []Window, last int64, admission bool) (*winSet, *quotaSet) {
	var buf [2 * MaxWindows]Window
	roll := windows
	if hasQuota(windows) {
		roll = buf[:0]
		for _, w := range windows {
			if !isQuota(w) {
				roll = append(roll, w)
			}
		}
	}
	at := roll // an admission refills its rolling buckets at its figures
	if !admission {
		at = nil // a reconcile only what it charges (reconcileQuotaWindows)
	}
	ws := winSetOf(sh, c.s.t.Bound(), h, roll, at, c.now, last, &c.ev)
	if ws != nil {
		ws.Full, ws.Debt = math.MaxInt64, true // settle sets both
	}
	qs := quotaSetOf(sh, c.s.t.Bound(), h, windows, c.now, &c.ev)
	if qs != nil {
		qs.Full = math.MaxInt64 // settle sets it
	}
	c.wsets[c.nsets], c.qsets[c.nsets] = ws, qs
	c.nsets++
	return ws, qs
}

// stager builds a decision's stages, in the order they are checked.
type stager struct {
	c             *quotaCall
	st            []qStage
	tokens, input int64
}

// perMinute adds a per-minute bucket's stage, unless its figure is
// Unlimited (no bucket: its Remaining reads 0).
func (g *stager) perMinute(b *bucket, fig, need int64, name Bucket, rem *int64) {
	if fig == Unlimited {
		return
	}
	g.st = append(g.st, qStage{b: b, need: need, debit: need, rate: fig, cap: 2 * fig, period: memstore.Minute, bucket: name, level: rem})
}

// windows adds the stages of windows (scope 0: the key's meters, 1: the
// workspace's) in sets ws (rolling) and qs (calendar and session),
// reporting to levels.
func (g *stager) windows(windows []Window, scope int, ws *winSet, qs *quotaSet, lent bool, levels []WindowLevels) {
	now := max(g.c.now, memstore.LastOf(qs))
	// Create the missing rolling buckets first: stages point into ws.B,
	// which creating may move (and the quota buckets likewise into qs.B).
	for i := range windows {
		w := &windows[i]
		id := quotaIDOf(w)
		for m, b := range WindowMeters()[scope] {
			if f := w.Figure(b); f > 0 {
				if isQuota(*w) {
					g.c.s.t.At(qs.Find(uint8(m), &id), w.Zone, now)
				} else {
					ws.Find(uint8(m), int64(w.Per), f, ws.Last)
				}
			}
		}
	}
	for i := range windows {
		w := &windows[i]
		id := quotaIDOf(w)
		for m, b := range WindowMeters()[scope] {
			f := w.Figure(b)
			if f == 0 {
				continue
			}
			s := qStage{w: w, rate: f, cap: f, period: uint64(w.Per), bucket: b, lent: lent, levels: &levels[i]}
			if isQuota(*w) {
				s.q = qs.Find(uint8(m), &id)
			} else {
				s.b = &ws.Find(uint8(m), int64(w.Per), f, ws.Last).Bucket
			}
			switch m {
			case 0:
				s.need, s.debit = 1, 1
			case 1:
				s.need, s.debit = g.tokens, g.tokens
			case 2:
				s.need, s.debit = g.input, g.input
			case 3:
				s.need = 1
			}
			g.st = append(g.st, s)
		}
	}
}

// quotaGauge is one gauge of a quota-path decision.
type quotaGauge struct {
	sh        *memShard
	h         uint64
	cap, held int64
	floor     int64
	bucket    Bucket
	lent      bool
}

// admitQuota is Admit on the quota path: the entries and their shards
// locked (lockQuota), the stages and gauges built (quotaStages), decided
// (decideQuota), the levels reported and the slots taken.
func (s *MemoryStore) admitQuota(r AdmitRequest) (Decision, error) {
	now := r.Now.UnixNano()
	lent := r.Model != "" && (lends(r.KeyPlan) || lends(r.WorkspacePlan))
	kp, wp := planOf(r.KeyPlan), planOf(r.WorkspacePlan)
	gauged := r.KeyLimits.ConcurrentRequests > 0 || r.WorkspaceLimits.ConcurrentRequests > 0 ||
		lent && (kp.ConcurrentRequests > 0 || wp.ConcurrentRequests > 0)
	if gauged && r.ID == "" {
		return Decision{}, ErrNoAdmissionID
	}
	var c quotaCall
	s.lockQuota(&c, r.Key, r.Workspace, r.Model, r.KeyLimits, r.WorkspaceLimits, r.Solo, lent, now)
	defer c.done()
	holder := c.ks
	if r.Solo {
		holder = c.wsh
	}
	if r.ID != "" {
		if holder.Holds(r.ID) {
			return Decision{}, errHeldID
		}
	}
	n := 4 + 4*(len(r.KeyLimits.Windows)+len(r.WorkspaceLimits.Windows)+len(kp.Windows)+len(wp.Windows))
	g := stager{c: &c, st: make([]qStage, 0, n), tokens: r.Tokens, input: max(0, r.InputTokens)} // one allocation for every stage
	var d Decision
	var lv quotaLevels
	var gbuf [4]quotaGauge
	gauges := g.quotaStages(&r, &kp, &wp, &d, &lv, gbuf[:0])
	if r.Reserve > 0 {
		withQuotaFloors(g.st, gauges, r.Reserve)
	}
	s.decideQuota(&d, g.st, gauges, stageWait(&r), now)
	reportQuota(&d, g.st, &lv, r.Solo)
	if d.Allowed && len(gauges) > 0 {
		holdQuotaSlots(holder, r.ID, gauges)
	}
	return d, nil
}

// quotaLevels are a quota-path decision's window levels, indexed as each
// set of windows: the key's, the workspace's, and the plan's lent to each.
type quotaLevels struct{ key, ws, keyPlan, wsPlan []WindowLevels }

// quotaStages adds r's stages to g in the order they are checked (the
// per-minute buckets, then each scope's lent plan windows and its own),
// the per-minute stages reporting to d.Remaining and the windows' to lv,
// and returns gauges with r's gauges appended, their slots held now read.
// kp and wp are the plans' figures (planOf).
func (g *stager) quotaStages(r *AdmitRequest, kp, wp *Limits, d *Decision, lv *quotaLevels, gauges []quotaGauge) []quotaGauge {
	if r.Solo {
		gauges = g.soloStages(r, wp, d, lv, gauges)
	} else {
		gauges = g.pairStages(r, kp, wp, d, lv, gauges)
	}
	for i := range gauges {
		gauges[i].held = gauges[i].sh.InFlight(gauges[i].h)
	}
	return gauges
}

// soloStages is quotaStages for a Solo request: one entry, whose windows
// and lent plan report for both scopes.
func (g *stager) soloStages(r *AdmitRequest, wp *Limits, d *Decision, lv *quotaLevels, gauges []quotaGauge) []quotaGauge {
	c := g.c
	lim := &r.WorkspaceLimits
	g.perMinute(&c.ke.Req, lim.RequestsPerMinute, 1, KeyRequests, &d.Remaining[KeyRequests])
	g.perMinute(&c.ke.Tok, lim.TokensPerMinute, r.Tokens, KeyTokens, &d.Remaining[KeyTokens])
	var plan Limits
	if c.lent {
		plan = *wp
		pws, pqs := c.sets(c.ws0, c.wh0, plan.Windows, c.ke.Last, true)
		lv.wsPlan = make([]WindowLevels, len(plan.Windows))
		g.windows(plan.Windows, 0, pws, pqs, true, lv.wsPlan)
	}
	ws, qs := c.sets(c.wsh, c.wh, lim.Windows, c.ke.Last, true)
	lv.ws = make([]WindowLevels, len(lim.Windows))
	g.windows(lim.Windows, 0, ws, qs, false, lv.ws)
	if plan.ConcurrentRequests > 0 {
		gauges = append(gauges, quotaGauge{sh: c.ws0, h: c.wh0, cap: plan.ConcurrentRequests, bucket: KeyConcurrent, lent: true})
	}
	if lim.ConcurrentRequests > 0 {
		gauges = append(gauges, quotaGauge{sh: c.wsh, h: c.wh, cap: lim.ConcurrentRequests, bucket: KeyConcurrent})
	}
	lv.key, lv.keyPlan = lv.ws, lv.wsPlan
	return gauges
}

// quotaScope is one scope of a request on the quota path, as its windows'
// stages are built: its entry's shard and hash, and the default buckets'
// (which keep a lent plan's windows), its figures and its plan's, its
// entry's clock, and where its levels go.
type quotaScope struct {
	sh, psh        *memShard
	h, ph          uint64
	lim, plan      *Limits
	last           int64
	levels, plevel *[]WindowLevels
}

// pairStages is quotaStages for a key within a workspace: the key's
// stages, then the workspace's, and the gauges in that order.
func (g *stager) pairStages(r *AdmitRequest, kp, wp *Limits, d *Decision, lv *quotaLevels, gauges []quotaGauge) []quotaGauge {
	c := g.c
	g.perMinute(&c.ke.Req, r.KeyLimits.RequestsPerMinute, 1, KeyRequests, &d.Remaining[KeyRequests])
	g.perMinute(&c.ke.Tok, r.KeyLimits.TokensPerMinute, r.Tokens, KeyTokens, &d.Remaining[KeyTokens])
	g.perMinute(&c.we.Req, r.WorkspaceLimits.RequestsPerMinute, 1, WorkspaceRequests, &d.Remaining[WorkspaceRequests])
	g.perMinute(&c.we.Tok, r.WorkspaceLimits.TokensPerMinute, r.Tokens, WorkspaceTokens, &d.Remaining[WorkspaceTokens])
	scopes := [2]quotaScope{
		{c.ks, c.ks0, c.pk, c.pk0, &r.KeyLimits, kp, c.ke.Last, &lv.key, &lv.keyPlan},
		{c.wsh, c.ws0, c.wh, c.wh0, &r.WorkspaceLimits, wp, c.we.Last, &lv.ws, &lv.wsPlan},
	}
	for scope, sd := range scopes {
		if c.lent {
			pws, pqs := c.sets(sd.psh, sd.ph, sd.plan.Windows, sd.last, true)
			*sd.plevel = make([]WindowLevels, len(sd.plan.Windows))
			g.windows(sd.plan.Windows, scope, pws, pqs, true, *sd.plevel)
		}
		ws, qs := c.sets(sd.sh, sd.h, sd.lim.Windows, sd.last, true)
		*sd.levels = make([]WindowLevels, len(sd.lim.Windows))
		g.windows(sd.lim.Windows, scope, ws, qs, false, *sd.levels)
	}
	// The gauges from an array of their own: one holding the levels'
	// pointers too would send them to the heap with the shards (escape
	// analysis follows a whole array).
	for scope, sd := range [2]struct {
		sh, psh   *memShard
		h, ph     uint64
		lim, plan *Limits
	}{
		{c.ks, c.ks0, c.pk, c.pk0, &r.KeyLimits, kp},
		{c.wsh, c.ws0, c.wh, c.wh0, &r.WorkspaceLimits, wp},
	} {
		b := [2]Bucket{KeyConcurrent, WorkspaceConcurrent}[scope]
		if c.lent && sd.plan.ConcurrentRequests > 0 {
			gauges = append(gauges, quotaGauge{sh: sd.psh, h: sd.ph, cap: sd.plan.ConcurrentRequests, bucket: b, lent: true})
		}
		if sd.lim.ConcurrentRequests > 0 {
			gauges = append(gauges, quotaGauge{sh: sd.sh, h: sd.h, cap: sd.lim.ConcurrentRequests, bucket: b})
		}
	}
	return gauges
}

// withQuotaFloors sets the floors a priority reserve of r millionths
// (r > 0) keeps in each stage and gauge, as withReserve does on the
// windowed path.
func withQuotaFloors(st []qStage, gauges []quotaGauge, r int64) {
	for i := range st {
		s := &st[i]
		s.floor = ReserveFloor(r, s.cap)
		s.need = min(s.need, s.cap+1) + s.floor
	}
	for i := range gauges {
		gauges[i].floor = ReserveFloor(r, gauges[i].cap)
	}
}

// reportQuota fills d's levels from the stages (each stage's level where
// it reports, a calendar or session window's end with it) and lv, and a
// Solo request's workspace levels from its key's.
func reportQuota(d *Decision, st []qStage, lv *quotaLevels, solo bool) {
	for i := range st {
		s := &st[i]
		if s.level != nil {
			*s.level = s.have()
			continue
		}
		s.levels.set(s.bucket, s.have())
		if s.q != nil {
			s.levels.Reset = s.q.End
		}
	}
	if solo {
		d.Remaining[WorkspaceRequests], d.Remaining[WorkspaceTokens] = d.Remaining[KeyRequests], d.Remaining[KeyTokens]
	}
	d.KeyWindows, d.WorkspaceWindows = nilIfEmpty(lv.key), nilIfEmpty(lv.ws)
	if len(lv.keyPlan) > 0 || len(lv.wsPlan) > 0 {
		pl := &PlanLevels{KeyWindows: nilIfEmpty(lv.keyPlan), WorkspaceWindows: nilIfEmpty(lv.wsPlan)}
		if solo {
			pl.KeyWindows = pl.WorkspaceWindows
		}
		d.Plan = pl
	}
}

// holdQuotaSlots takes a slot of each gauge of an admission and records
// them under its ID in holder (the key's shard, or the workspace's for a
// Solo request), as the admission's Reconcile releases them.
func holdQuotaSlots(holder *memShard, id string, gauges []quotaGauge) {
	var hs heldSlots
	for _, q := range gauges {
		q.sh.Take(q.h)
		switch {
		case q.lent && q.bucket == WorkspaceConcurrent:
			hs.WP, hs.HaveWP = q.h, true
		case q.lent:
			hs.KP, hs.HaveKP = q.h, true
		case q.bucket == WorkspaceConcurrent:
			hs.WS, hs.HaveWS = q.h, true
		default:
			hs.Key, hs.HaveKey = q.h, true
		}
	}
	holder.Hold(id, hs)
}

func nilIfEmpty(l []WindowLevels) []WindowLevels {
	if len(l) == 0 {
		return nil
	}
	return l
}

// decideQuota decides over the stages in order, then the gauges: all are
// debited (a session bucket opened) only if all have room and every gauge
// a slot above its floor; the caller takes the slots. A reservation
// (maxWait > 0) is granted only when every calendar and session bucket has
// room now and the wait ends before their period's (or session's) end: one
// that waits for a period's start or a session's end, or would run past
// it, is refused, its RetryAfter the time to that boundary or the wait.
func (s *MemoryStore) decideQuota(d *Decision, st []qStage, gauges []quotaGauge, maxWait time.Duration, now int64) {
	refused := -1
	for i := range st {
		if st[i].have() < st[i].need {
			refused = i
			break
		}
	}
	debit := func() {
		for i := range st {
			if q := st[i].q; q != nil {
				q.Open(now)
				q.Spent += st[i].debit
			} else {
				st[i].b.Level -= st[i].debit
			}
		}
	}
	fullGauge := func() (quotaGauge, bool) {
		for _, g := range gauges {
			if g.held+g.floor >= g.cap {
				return g, true
			}
		}
		return quotaGauge{}, false
	}
	if refused < 0 {
		if g, full := fullGauge(); full {
			d.Refused, d.RetryAfter, d.Lent, d.ByReserve = g.bucket, time.Second, g.lent, g.held < g.cap
			return
		}
		debit()
		d.Allowed = true
		return
	}
	rs := &st[refused]
	d.Refused, d.Lent = rs.bucket, rs.lent
	if rs.w != nil {
		d.Window, d.Calendar, d.Zone, d.Session = rs.w.Per, rs.w.Calendar, zoneName(rs.w.Zone), rs.w.Session
	} else {
		d.Window = time.Minute
	}
	d.ByReserve = rs.floor > 0 && rs.have() >= rs.need-rs.floor
	var exact time.Duration
	quotaWaits := false
	for i := range st {
		c, e, never := st[i].wait(now)
		d.NeverFits = d.NeverFits || never
		d.RetryAfter = max(d.RetryAfter, c)
		exact = max(exact, e)
		if st[i].q != nil && e > 0 {
			quotaWaits = true
		}
	}
	if maxWait <= 0 || d.NeverFits || exact > maxWait || quotaWaits || crossesEnd(st, now, exact) {
		return
	}
	if g, full := fullGauge(); full {
		d.Refused, d.Window, d.Calendar, d.Zone, d.Session, d.Lent = g.bucket, 0, 0, "", false, g.lent
		d.RetryAfter, d.ByReserve = max(d.RetryAfter, time.Second), g.held < g.cap
		return
	}
	debit()
	d.Allowed, d.Refused, d.Window, d.Wait, d.RetryAfter, d.ByReserve, d.Lent = true, 0, 0, exact, 0, false, false
	d.Calendar, d.Zone, d.Session = 0, "", false
}

// crossesEnd reports whether a reservation of wait at now would run at or
// after the end of a calendar period or a session one of st's quota
// buckets is in: it would be debited in the period it waits in and run in
// the next, which starts full (so one period would admit its figure and
// the reservation). Such a request is refused instead, its RetryAfter the
// wait, past which the next period decides it.
func crossesEnd(st []qStage, now int64, wait time.Duration) bool {
	for i := range st {
		q := st[i].q
		if q == nil {
			continue
		}
		end := q.End
		if q.Session && end <= now {
			end = now + q.Per // the session this admission would open
		}
		if end > 0 && now+int64(wait) >= end {
			return true
		}
	}
	return false
}

// reconcileQuota is Reconcile on the quota path: the per-minute tokens
// buckets (none for an Unlimited figure), the entry's windows and the
// plan's lent ones in one step, releasing the admission's slots.
func (s *MemoryStore) reconcileQuota(r ReconcileRequest) {
	now := r.Now.UnixNano()
	lent := r.Model != "" && (lends(r.KeyPlan) || lends(r.WorkspacePlan))
	kp, wp := planOf(r.KeyPlan), planOf(r.WorkspacePlan)
	var c quotaCall
	s.lockQuota(&c, r.Key, r.Workspace, r.Model, r.KeyLimits, r.WorkspaceLimits, r.Solo, lent, now)
	defer c.done()
	admitted := r.Admitted.UnixNano()
	if r.Admitted.IsZero() {
		admitted = now
	}
	type side struct {
		sh    *memShard
		h     uint64
		lim   *Limits
		scope int
		last  int64
	}
	var sides []side
	holder := c.ks
	if r.Solo {
		holder = c.wsh
		reconcileLimited(c.ke, r, WorkspaceTokens, r.WorkspaceLimits)
		if c.lent {
			sides = append(sides, side{c.ws0, c.wh0, &wp, 0, c.ke.Last})
		}
		sides = append(sides, side{c.wsh, c.wh, &r.WorkspaceLimits, 0, c.ke.Last})
	} else {
		reconcileLimited(c.ke, r, KeyTokens, r.KeyLimits)
		reconcileLimited(c.we, r, WorkspaceTokens, r.WorkspaceLimits)
		if c.lent {
			sides = append(sides, side{c.ks0, c.pk0, &kp, 0, c.ke.Last}, side{c.ws0, c.wh0, &wp, 1, c.we.Last})
		}
		sides = append(sides, side{c.ks, c.pk, &r.KeyLimits, 0, c.ke.Last}, side{c.wsh, c.wh, &r.WorkspaceLimits, 1, c.we.Last})
	}
	for _, sd := range sides {
		if len(sd.lim.Windows) == 0 {
			continue
		}
		ws, qs := c.sets(sd.sh, sd.h, sd.lim.Windows, sd.last, false)
		s.reconcileQuotaWindows(ws, qs, r, sd.lim.Windows, sd.scope, admitted)
	}
	if hs, ok := holder.Unhold(r.ID); ok {
		if hs.HaveKey {
			holder.Give(hs.Key)
		}
		if hs.HaveWS {
			c.wsh.Give(hs.WS)
		}
		if hs.HaveKP {
			shardOf(s, hs.KP, c.ks0, c.ws0, r.Solo).Give(hs.KP)
		}
		if hs.HaveWP {
			c.ws0.Give(hs.WP)
		}
	}
}

// reconcileLimited is reconcileEntry for figures that may be Unlimited:
// such a bucket does not exist and is skipped.
func reconcileLimited(e *entry, r ReconcileRequest, tok Bucket, lim Limits) {
	if r.Refund {
		if lim.RequestsPerMinute != Unlimited {
			e.Req.Adjust(-1, 2*lim.RequestsPerMinute)
		}
		if lim.TokensPerMinute != Unlimited {
			e.Tok.Adjust(-r.Estimate, 2*lim.TokensPerMinute)
		}
		return
	}
	if lim.TokensPerMinute != Unlimited {
		e.Tok.Adjust(r.BoundedActual(tok)-r.Estimate, 2*lim.TokensPerMinute)
	}
}

// shardOf is the shard holding lent key gauge kp: the default key shard
// (a Solo request's one gauge is kept in the workspace's).
func shardOf(_ *MemoryStore, _ uint64, ks0, ws0 *memShard, solo bool) *memShard {
	if solo {
		return ws0
	}
	return ks0
}

// reconcileQuotaWindows applies r to windows' buckets in ws (rolling) and
// qs (calendar and session): a rolling bucket as any reconcile does; a
// calendar or session bucket adds the charge to the period (or session)
// of the admission (admitted) while it is in force, else lands a debit
// still owed in the current one (opening a session at now if none is)
// and drops a credit.
func (s *MemoryStore) reconcileQuotaWindows(ws *winSet, qs *quotaSet, r ReconcileRequest, windows []Window, scope int, admitted int64) {
	now := max(memstore.LastOf(qs), r.Now.UnixNano())
	for i := range windows {
		w := &windows[i]
		id := quotaIDOf(w)
		for m, b := range WindowMeters()[scope] {
			f := w.Figure(b)
			if f == 0 {
				continue
			}
			delta := r.WindowDelta(b, *w)
			if !isQuota(*w) {
				if delta != 0 { // as reconcileWindows: at the figure it last stored
					wb := ws.Find(uint8(m), int64(w.Per), f, ws.Last)
					wb.Refill(r.Now.UnixNano())
					wb.Adjust(delta, wb.Fig)
				}
				continue
			}
			q := qs.Find(uint8(m), &id)
			s.t.At(q, w.Zone, now)
			inForce := q.End != 0 && admitted >= q.Start && admitted < q.End
			switch {
			case inForce:
				q.Add(delta, f)
			case delta > 0:
				if q.Session && q.End == 0 {
					openSession(qs, w, scope, now) // one session for all the window's meters
					q = qs.Find(uint8(m), &id)     // creating the others may have moved it
				}
				q.Add(delta, f)
			}
		}
	}
}

// openSession opens session window w's session at now in each of its
// meters' buckets that has none open (a late debit opening it).
func openSession(qs *quotaSet, w *Window, scope int, now int64) {
	id := quotaID(w)
	for m, b := range WindowMeters()[scope] {
		if w.Figure(b) > 0 {
			q := qs.Find(uint8(m), &id)
			if q.End != 0 && now >= q.End {
				q.Spent, q.Start, q.End = 0, 0, 0
			}
			q.Open(now)
		}
	}
}

// Peek implements Peeker: the levels Admit would find for r now, debiting
// nothing, taking no slot, opening no session and creating nothing.
func (s *MemoryStore) Peek(_ context.Context, r AdmitRequest) (Decision, error) {
	now := r.Now.UnixNano()
	var d Decision
	b := s.exactLevels(r.Key, r.Workspace, r.Model, entryLimits(r.KeyLimits), entryLimits(r.WorkspaceLimits), r.Now)
	for i := range d.Remaining {
		if Bucket(i).PerMinute(r.KeyLimits, r.WorkspaceLimits) != Unlimited {
			d.Remaining[i] = b[i].Level
		}
	}
	if r.Solo {
		d.Remaining[WorkspaceRequests], d.Remaining[WorkspaceTokens] = d.Remaining[KeyRequests], d.Remaining[KeyTokens]
	}
	lent := r.Model != "" && (lends(r.KeyPlan) || lends(r.WorkspacePlan))
	kp, wp := planOf(r.KeyPlan), planOf(r.WorkspacePlan)
	var pk, wh, pk0, wh0 uint64
	if r.Solo {
		wh = s.t.WorkspaceHash(r.Workspace, r.Model)
		wh0 = s.t.WorkspaceHash(r.Workspace, "")
		d.WorkspaceWindows = s.peekWindows(s.t.WorkspaceShard(wh), wh, r.WorkspaceLimits.Windows, 0, now)
		d.KeyWindows = d.WorkspaceWindows
		if lent {
			w := s.peekWindows(s.t.WorkspaceShard(wh0), wh0, wp.Windows, 0, now)
			d.Plan = &PlanLevels{KeyWindows: w, WorkspaceWindows: w}
		}
		return d, nil
	}
	pk, wh = s.t.Hashes(r.Key, r.Workspace, r.Model)
	d.KeyWindows = s.peekWindows(s.t.KeyShard(pk), pk, r.KeyLimits.Windows, 0, now)
	d.WorkspaceWindows = s.peekWindows(s.t.WorkspaceShard(wh), wh, r.WorkspaceLimits.Windows, 1, now)
	if lent {
		pk0, wh0 = s.t.Hashes(r.Key, r.Workspace, "")
		d.Plan = &PlanLevels{KeyWindows: s.peekWindows(s.t.KeyShard(pk0), pk0, kp.Windows, 0, now),
			WorkspaceWindows: s.peekWindows(s.t.WorkspaceShard(wh0), wh0, wp.Windows, 1, now)}
	}
	return d, nil
}

// peekWindows returns windows' levels in hash h's sets of sh as of now
// (a bucket never seen reads full), changing nothing.
func (s *MemoryStore) peekWindows(sh *memShard, h uint64, windows []Window, scope int, now int64) []WindowLevels {
	if len(windows) == 0 {
		return nil
	}
	out := make([]WindowLevels, len(windows))
	sh.Mu.Lock()
	defer sh.Mu.Unlock()
	ws, qs := sh.WinSetAt(h), sh.QuotaSetAt(h)
	for i := range windows {
		w := &windows[i]
		id := quotaIDOf(w)
		for m, b := range WindowMeters()[scope] {
			f := w.Figure(b)
			if f == 0 {
				continue
			}
			level := f
			switch {
			case isQuota(*w):
				q := quotaBucket{Cal: calendar.Kind(w.Calendar), Session: w.Session, Per: int64(w.Per)}
				at := now
				if qs != nil {
					if p := qs.Lookup(uint8(m), &id); p != nil {
						q = *p // a copy: Peek changes nothing
					}
					at = max(at, qs.Last)
				}
				s.t.At(&q, w.Zone, at)
				level = f - q.Spent
				if q.Session && q.End == 0 {
					break
				}
				out[i].Reset = q.End
			case ws != nil:
				for _, wb := range ws.B {
					if wb.Meter == uint8(m) && wb.Per == int64(w.Per) {
						level = memstore.PeekRolling(wb, f, now)
						break
					}
				}
			}
			out[i].set(b, level)
		}
	}
	return out
}

// followQuotas is Follow's part for calendar and session windows: each
// bucket of r's windows (the plan's lent ones included) takes the spend d
// reports for it, when more than its own, in the period (or session) d
// reports (WindowLevels.Reset): a later period than its own replaces it,
// an earlier one is stale and ignored. Nothing is given back: a bucket
// keeps the larger of the two spends.
func (s *MemoryStore) followQuotas(r *AdmitRequest, d *Decision) {
	now := r.Now.UnixNano()
	lent := r.Model != "" && (lends(r.KeyPlan) || lends(r.WorkspacePlan))
	kp, wp := planOf(r.KeyPlan), planOf(r.WorkspacePlan)
	kpl, wpl := d.planLevels()
	type side struct {
		sh     *memShard
		h      uint64
		lim    *Limits
		levels []WindowLevels
		scope  int
	}
	var sides []side
	if r.Solo {
		wh := s.t.WorkspaceHash(r.Workspace, r.Model)
		sides = append(sides, side{s.t.WorkspaceShard(wh), wh, &r.WorkspaceLimits, d.WorkspaceWindows, 0})
		if lent {
			wh0 := s.t.WorkspaceHash(r.Workspace, "")
			sides = append(sides, side{s.t.WorkspaceShard(wh0), wh0, &wp, wpl, 0})
		}
	} else {
		pk, wh := s.t.Hashes(r.Key, r.Workspace, r.Model)
		sides = append(sides, side{s.t.KeyShard(pk), pk, &r.KeyLimits, d.KeyWindows, 0},
			side{s.t.WorkspaceShard(wh), wh, &r.WorkspaceLimits, d.WorkspaceWindows, 1})
		if lent {
			pk0, wh0 := s.t.Hashes(r.Key, r.Workspace, "")
			sides = append(sides, side{s.t.KeyShard(pk0), pk0, &kp, kpl, 0},
				side{s.t.WorkspaceShard(wh0), wh0, &wp, wpl, 1})
		}
	}
	for _, sd := range sides {
		if !hasQuota(sd.lim.Windows) || len(sd.levels) != len(sd.lim.Windows) {
			continue
		}
		sd.sh.Mu.Lock()
		var ev evicted
		qs := quotaSetOf(sd.sh, s.t.Bound(), sd.h, sd.lim.Windows, now, &ev)
		for i := range sd.lim.Windows {
			w := &sd.lim.Windows[i]
			if !isQuota(*w) {
				continue
			}
			id := quotaID(w)
			for m, b := range WindowMeters()[sd.scope] {
				f := w.Figure(b)
				if f == 0 {
					continue
				}
				q := qs.Find(uint8(m), &id)
				s.t.At(q, w.Zone, qs.Last)
				s.t.Follow(q, w.Zone, max(f-sd.levels[i].Level(b), 0), sd.levels[i].ResetAt())
			}
		}
		qs.Settle()
		sd.sh.Mu.Unlock()
		s.t.Note(ev)
	}
}

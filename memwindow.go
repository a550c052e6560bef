package llmrate

import (
	"github.com/llmrate/llmrate/internal/memstore"
	"time"
)

// windowed reports whether either side's figures carry windows.
func windowed(kl, wl Limits) bool { return len(kl.Windows) > 0 || len(wl.Windows) > 0 }

// winStage is one bucket of a windowed decision: what it needs, what it is
// debited, its figures and its name.
type winStage struct {
	b           *bucket
	need, debit int64 // need includes a priority reserve's floor (withReserve)
	rate, cap   int64
	period      uint64
	bucket      Bucket
	window      time.Duration
	levels      *WindowLevels // where to report its level (nil: a per-minute bucket)
}

// windowStages appends the stages of windows' buckets in set ws for scope
// (0: key, 1: workspace), in order (each window: requests, tokens, input,
// output), with the levels slice they report to.
func windowStages(st []winStage, ws *winSet, windows []Window, scope int, tokens, input int64, levels []WindowLevels) []winStage {
	// Create the missing buckets first: the stages point into ws.B, which
	// creating may move.
	for _, w := range windows {
		for m, b := range WindowMeters()[scope] {
			if f := w.Figure(b); f > 0 {
				ws.Find(uint8(m), int64(w.Per), f, ws.Last)
			}
		}
	}
	for i, w := range windows {
		for m, b := range WindowMeters()[scope] {
			f := w.Figure(b)
			if f == 0 {
				continue
			}
			wb := ws.Find(uint8(m), int64(w.Per), f, ws.Last)
			s := winStage{b: &wb.Bucket, rate: f, cap: f, period: uint64(w.Per), bucket: b, window: w.Per, levels: &levels[i]}
			switch m {
			case 0:
				s.need, s.debit = 1, 1
			case 1:
				s.need, s.debit = tokens, tokens
			case 2:
				s.need, s.debit = input, input
			case 3:
				s.need = 1
			}
			st = append(st, s)
		}
	}
	return st
}

// withReserve adds to what each stage needs the floor a reserve of r
// millionths keeps in it (r > 0; ReserveFloor takes one above MaxReserve as MaxReserve), ⌈r ×
// capacity⌉: the level the stage must hold to admit the request is its
// own need (at most capacity + 1: one that large never fits anyway) plus
// the floor, so that decideStages checks, and waits for, need as without a
// reserve, at no cost to requests without one.
func withReserve(st []winStage, r int64) {
	for i := range st {
		st[i].need = min(st[i].need, st[i].cap+1) + ReserveFloor(r, st[i].cap)
	}
}

// byReserve reports whether the stage that refused a request with a
// reserve of r millionths (withReserve; the first whose level is below its
// need: a refusal debits nothing) had room for the request's own need:
// only the floor kept it out.
func byReserve(st []winStage, r int64) bool {
	for i := range st {
		if s := &st[i]; s.b.Level < s.need {
			return s.b.Level >= s.need-ReserveFloor(r, s.cap)
		}
	}
	return false
}

// stageWait is the longest reservation decideStages may grant r: its
// MaxWait, or none with a priority reserve (AdmitRequest.Reserve). A
// reservation is debited at admission, so one granted to a request that
// does not fit above its floor now would take a bucket below the floor
// at once; such a request is refused instead, its Retry-After the wait
// until it fits above every floor.
func stageWait(r *AdmitRequest) time.Duration {
	if r.Reserve > 0 {
		return 0
	}
	return r.MaxWait
}

// decideStages decides r over stages in order, then the gauges (g; nil:
// none in force): all are debited only if all have room and every gauge a
// free slot (the caller takes the slots); with a MaxWait (stageWait) a
// request that would fit every stage within it is debited all the same (a
// reservation). RetryAfter is the largest of the stages' exact waits, each
// capped at MaxRetryAfter or its window's Per when longer. With r's
// priority reserve each stage and gauge first gets its floor (withReserve,
// gaugeCheck.withReserve): a stage has room only above its floor, and a
// gauge a free slot only above its; ByReserve says a refusal came of a
// floor alone (the gauge had a free slot, or the stage room: byReserve).
func decideStages(st []winStage, r *AdmitRequest, g *gaugeCheck) Decision {
	if r.Reserve > 0 {
		withReserve(st, r.Reserve)
		g.withReserve(r.Reserve)
	}
	maxWait := stageWait(r)
	var d Decision
	refused := -1
	for i := range st {
		if st[i].b.Level < st[i].need {
			refused = i
			break
		}
	}
	debit := func() {
		for i := range st {
			st[i].b.Level -= st[i].debit
		}
	}
	if refused < 0 {
		if g != nil {
			if b, full := g.full(); full {
				d.Refused, d.RetryAfter, d.ByReserve = b, time.Second, g.byReserve(b)
				return d
			}
		}
		debit()
		d.Allowed = true
		return d
	}
	d.Refused, d.Window = st[refused].bucket, st[refused].window
	var exact time.Duration // the exact time until all fit (past every cap: beyond it)
	for _, s := range st {
		c := max(MaxRetryAfter, time.Duration(s.period))
		w, never := s.b.PWait(s.need, s.rate, s.cap, c+1, s.period)
		d.NeverFits = d.NeverFits || never
		exact = max(exact, w)
		d.RetryAfter = max(d.RetryAfter, min(w, c))
	}
	if maxWait <= 0 || d.NeverFits || exact > maxWait {
		if r.Reserve > 0 {
			d.ByReserve = byReserve(st, r.Reserve)
		}
		return d
	}
	if g != nil {
		if b, full := g.full(); full {
			d.Refused, d.Window, d.RetryAfter, d.ByReserve = b, 0, max(d.RetryAfter, time.Second), g.byReserve(b)
			return d
		}
	}
	debit()
	d.Allowed, d.Refused, d.Window, d.Wait, d.RetryAfter = true, 0, 0, exact, 0
	return d
}

// report fills d's levels from the stages: the four per-minute buckets
// (the first four stages, or two for a Solo request) and the windows'.
func report(d *Decision, st []winStage, solo bool) {
	if solo {
		d.Remaining = [4]int64{st[0].b.Level, st[1].b.Level, st[0].b.Level, st[1].b.Level}
		st = st[2:]
	} else {
		d.Remaining = [4]int64{st[0].b.Level, st[1].b.Level, st[2].b.Level, st[3].b.Level}
		st = st[4:]
	}
	for _, s := range st {
		s.levels.set(s.bucket, s.b.Level)
	}
}

// perMinuteStages returns the stages of the four per-minute buckets (two
// for a Solo request: ke is then the one entry).
func perMinuteStages(st []winStage, ke, we *entry, kl, wl Limits, tokens int64) []winStage {
	add := func(b *bucket, need, rate int64, name Bucket) {
		st = append(st, winStage{b: b, need: need, debit: need, rate: rate, cap: 2 * rate, period: memstore.Minute, bucket: name, window: time.Minute})
	}
	add(&ke.Req, 1, kl.RequestsPerMinute, KeyRequests)
	add(&ke.Tok, tokens, kl.TokensPerMinute, KeyTokens)
	if we != nil {
		add(&we.Req, 1, wl.RequestsPerMinute, WorkspaceRequests)
		add(&we.Tok, tokens, wl.TokensPerMinute, WorkspaceTokens)
	}
	return st
}

// admitReserved is Admit for a request with a priority reserve
// (AdmitRequest.Reserve) and no windows: admitWindowed over the four
// per-minute stages, kept in an array of its own (no allocation, and no
// cost to admitWindowed's other callers).
func (s *MemoryStore) admitReserved(r AdmitRequest) (Decision, error) {
	var four [4]winStage
	return s.admitWindowed(&r, four[:0])
}

// admitWindowed is Admit for figures with windows (gauges too, if any),
// or with a priority reserve (AdmitRequest.Reserve): the per-minute
// buckets, the key's windows, the workspace's and the gauges in one
// decision, under both shards' locks, each above its floor. st is an
// empty slice with room for every stage, or nil (allocated here).
func (s *MemoryStore) admitWindowed(r *AdmitRequest, st []winStage) (Decision, error) {
	if st == nil {
		st = make([]winStage, 0, 4+4*(len(r.KeyLimits.Windows)+len(r.WorkspaceLimits.Windows)))
	}
	if r.Solo {
		return s.admitWindowedSolo(r, st)
	}
	// A key within a workspace: the key's entry and windows in its key
	// shard, the workspace's in its workspace shard. (Here, not in a
	// function of its own: forwarding its Decision would cost the
	// commonest windowed admission a copy.)
	now := r.Now.UnixNano()
	kc, wc := max(0, r.KeyLimits.ConcurrentRequests), max(0, r.WorkspaceLimits.ConcurrentRequests)
	if (kc > 0 || wc > 0) && r.ID == "" {
		return Decision{}, ErrNoAdmissionID
	}
	pk, wh := s.t.Hashes(r.Key, r.Workspace, r.Model)
	ks, wsh, ke, we, ev := s.t.Lock(pk, wh, perMinute(&r.KeyLimits), perMinute(&r.WorkspaceLimits), now)
	if r.ID != "" && ks.Holds(r.ID) {
		memstore.ReleasePair(ks, wsh, ke, we)
		wsh.Mu.Unlock()
		ks.Mu.Unlock()
		s.t.Note(ev)
		return Decision{}, errHeldID
	}
	var kw, ww *winSet
	if windowed(r.KeyLimits, r.WorkspaceLimits) { // not for a reserve alone: windows are left alone
		kw = winSetOf(ks, s.t.Bound(), pk, r.KeyLimits.Windows, r.KeyLimits.Windows, now, ke.Last, &ev)
		ww = winSetOf(wsh, s.t.Bound(), wh, r.WorkspaceLimits.Windows, r.WorkspaceLimits.Windows, now, we.Last, &ev)
	}
	kls, wls := make([]WindowLevels, len(r.KeyLimits.Windows)), make([]WindowLevels, len(r.WorkspaceLimits.Windows))
	tokens, input := r.Tokens, max(0, r.InputTokens)
	st = perMinuteStages(st, ke, we, r.KeyLimits, r.WorkspaceLimits, tokens)
	st = windowStages(st, kw, r.KeyLimits.Windows, 0, tokens, input, kls)
	st = windowStages(st, ww, r.WorkspaceLimits.Windows, 1, tokens, input, wls)
	var g *gaugeCheck
	if kc > 0 || wc > 0 {
		g = &gaugeCheck{keyCap: kc, keyNow: ks.InFlight(pk), wsCap: wc, wsNow: wsh.InFlight(wh)}
	}
	d := decideStages(st, r, g)
	report(&d, st, false)
	if len(kls) > 0 {
		d.KeyWindows = kls
	}
	if len(wls) > 0 {
		d.WorkspaceWindows = wls
	}
	if d.Allowed && g != nil {
		holdSlots(ks, wsh, r.ID, pk, wh, kc, wc)
	}
	ke.Settle(r.KeyLimits.RequestsPerMinute, r.KeyLimits.TokensPerMinute)
	we.Settle(r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute)
	kw.Settle(4 * MaxWindow)
	ww.Settle(4 * MaxWindow)
	memstore.ReleasePair(ks, wsh, ke, we)
	wsh.Mu.Unlock()
	ks.Mu.Unlock()
	s.t.Note(ev)
	return d, nil
}

// admitWindowedSolo is admitWindowed for a Solo request: one entry, in
// its workspace shard, whose windows report for both scopes.
func (s *MemoryStore) admitWindowedSolo(r *AdmitRequest, st []winStage) (Decision, error) {
	now := r.Now.UnixNano()
	lim := &r.WorkspaceLimits
	if lim.ConcurrentRequests > 0 && r.ID == "" {
		return Decision{}, ErrNoAdmissionID // before any entry is made, as on the pair path
	}
	wh := s.t.WorkspaceHash(r.Workspace, r.Model)
	sh, e, ev := s.t.Solo(wh, perMinute(lim), now)
	if r.ID != "" && sh.Holds(r.ID) {
		e.Release(sh.Epoch())
		sh.Mu.Unlock()
		s.t.Note(ev)
		return Decision{}, errHeldID
	}
	// A request with a reserve but no windows leaves the windows alone,
	// as any request without windows does.
	var ws *winSet
	if len(lim.Windows) > 0 {
		ws = winSetOf(sh, s.t.Bound(), wh, lim.Windows, lim.Windows, now, e.Last, &ev)
	}
	levels := make([]WindowLevels, len(lim.Windows))
	st = perMinuteStages(st, e, nil, *lim, *lim, r.Tokens)
	st = windowStages(st, ws, lim.Windows, 0, r.Tokens, max(0, r.InputTokens), levels)
	var g *gaugeCheck
	if lim.ConcurrentRequests > 0 {
		g = &gaugeCheck{keyCap: lim.ConcurrentRequests, keyNow: sh.InFlight(wh)}
	}
	d := decideStages(st, r, g)
	report(&d, st, true)
	if len(levels) > 0 {
		d.KeyWindows, d.WorkspaceWindows = levels, levels
	}
	if d.Allowed && g != nil {
		sh.Take(wh)
		sh.Hold(r.ID, heldSlots{Key: wh, HaveKey: true})
	}
	e.Settle(lim.RequestsPerMinute, lim.TokensPerMinute)
	ws.Settle(4 * MaxWindow)
	e.Release(sh.Epoch())
	sh.Mu.Unlock()
	s.t.Note(ev)
	return d, nil
}

// reconcileWindows applies r to the window buckets of set ws for scope (0:
// key, 1: workspace), windows the figures of r's admission: a bucket with
// a delta (ReconcileRequest.WindowDelta, bounded at r's figures) is
// refilled up to now at its own figure (its latest admission's: r's may
// be stale), created full at r's if absent, then takes the delta, its
// level capped at that figure and floored at minus twice it; a bucket
// with none is left alone, its clock too (as in Redis).
func reconcileWindows(ws *winSet, r ReconcileRequest, windows []Window, scope int, now int64) {
	for _, w := range windows {
		for m, b := range WindowMeters()[scope] {
			f := w.Figure(b)
			if f == 0 {
				continue
			}
			delta := r.WindowDelta(b, w)
			if delta == 0 {
				continue
			}
			wb := ws.Find(uint8(m), int64(w.Per), f, ws.Last)
			wb.Refill(now)
			wb.Adjust(delta, wb.Fig)
		}
	}
}

// reconcileWindowed is Reconcile for figures with windows: the per-minute
// tokens buckets and the windows' buckets in one step, under both shards'
// locks, releasing the admission's gauge slots as any reconcile does.
func (s *MemoryStore) reconcileWindowed(r ReconcileRequest) {
	now := r.Now.UnixNano()
	if r.Solo {
		lim := r.WorkspaceLimits
		wh := s.t.WorkspaceHash(r.Workspace, r.Model)
		sh, e, ev := s.t.Solo(wh, perMinute(&lim), now)
		reconcileEntry(e, &r, WorkspaceTokens, lim)
		ws := winSetOf(sh, s.t.Bound(), wh, lim.Windows, nil, now, e.Last, &ev)
		reconcileWindows(ws, r, lim.Windows, 0, now)
		e.Settle(lim.RequestsPerMinute, lim.TokensPerMinute)
		ws.Settle(4 * MaxWindow)
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
	reconcileEntry(ke, &r, KeyTokens, r.KeyLimits)
	reconcileEntry(we, &r, WorkspaceTokens, r.WorkspaceLimits)
	kw := winSetOf(ks, s.t.Bound(), pk, r.KeyLimits.Windows, nil, now, ke.Last, &ev)
	ww := winSetOf(wsh, s.t.Bound(), wh, r.WorkspaceLimits.Windows, nil, now, we.Last, &ev)
	reconcileWindows(kw, r, r.KeyLimits.Windows, 0, now)
	reconcileWindows(ww, r, r.WorkspaceLimits.Windows, 1, now)
	ke.Settle(r.KeyLimits.RequestsPerMinute, r.KeyLimits.TokensPerMinute)
	we.Settle(r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute)
	kw.Settle(4 * MaxWindow)
	ww.Settle(4 * MaxWindow)
	memstore.ReleasePair(ks, wsh, ke, we)
	releaseSlots(ks, wsh, r.ID)
	wsh.Mu.Unlock()
	ks.Mu.Unlock()
	s.t.Note(ev)
}

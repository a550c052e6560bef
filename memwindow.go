package llmrate

import (
	"math"
	"time"
)

// The memory store's windows (Limits.Windows), kept apart from the entries
// so that an admission without windows costs what it did before windows
// existed: a windowed admission or reconcile takes the locked path (both
// shards' locks, as under a gauge), and finds its window buckets in its
// shards' window sets, by the hash of the entry they belong to (a key's in
// its key shard, a workspace's, or a Solo request's, in its workspace
// shard).

// winSet is the window buckets of one entry hash: one per (meter, Per)
// seen, each with the figure of its latest admission and a clock of its
// own (as a Redis window entry has).
type winSet struct {
	last int64 // the latest clock reading seen
	// full is the clock reading by which time alone refills every bucket
	// to full under the figures of its latest use (math.MaxInt64: not
	// known to); debt whether a bucket was below zero after the latest use.
	full int64
	debt bool
	b    []winBucket
}

// winBucket is one window bucket: capacity fig, refilled fig per per
// nanoseconds, in the exact arithmetic of bucket with the period per (its
// fraction is in 1/per units), up to last, its clock.
//
// A store keeps levels, not figures: fig is the figure of the bucket's
// latest admission, which alone sets it (a changed figure keeps the
// level, clamped to it). A reconcile carries the figures in force at its
// admission, maybe changed since: it refills the buckets it charges at
// fig, not at its own, and leaves the others (clock included) alone.
type winBucket struct {
	per   int64
	fig   int64
	last  int64
	meter uint8 // the index of its meter in WindowMeters' rows
	bucket
}

// windowed reports whether either side's figures carry windows.
func windowed(kl, wl Limits) bool { return len(kl.Windows) > 0 || len(wl.Windows) > 0 }

// find returns the bucket of meter m and window per, creating it full at
// fig, its clock at now (the set's: the latest reading seen), if absent.
func (ws *winSet) find(m uint8, per, fig, now int64) *winBucket {
	for i := range ws.b {
		if ws.b[i].meter == m && ws.b[i].per == per {
			return &ws.b[i]
		}
	}
	ws.b = append(ws.b, winBucket{per: per, fig: fig, last: now, meter: m, bucket: bucket{level: fig}})
	return &ws.b[len(ws.b)-1]
}

// refill refills wb up to now at its figure (a level above it, the figure
// lowered since, is clamped). A clock reading earlier than its clock
// refills nothing.
func (wb *winBucket) refill(now int64) {
	dt := now - wb.last
	if dt > 0 {
		wb.last = now
	} else {
		dt = 0
	}
	wb.prefill(wb.fig, wb.fig, dt, uint64(wb.per))
}

// advance refills, up to now, the buckets in windows (an admission's
// figures; nil for a reconcile's), each at its figure there (a changed
// figure clamps the level), and leaves the others as they are, clock
// included. A bucket that time alone has refilled to full at its own
// figure is forgotten, as a Redis entry expires: dropped, or, in windows,
// full again at its figure there.
func (ws *winSet) advance(now int64, windows []Window) {
	ws.last = max(ws.last, now)
	kept := ws.b[:0]
	for _, wb := range ws.b {
		var f int64
		for _, w := range windows {
			if int64(w.Per) == wb.per {
				f = w.Figure(WindowMeters()[0][wb.meter])
				break
			}
		}
		c := wb
		c.refill(now)
		switch full := c.level >= c.fig; {
		case f > 0 && full:
			kept = append(kept, winBucket{per: wb.per, fig: f, last: c.last, meter: wb.meter, bucket: bucket{level: f}})
		case f > 0:
			wb.fig = f
			wb.refill(now)
			kept = append(kept, wb)
		case !full:
			kept = append(kept, wb)
		}
	}
	clear(ws.b[len(kept):])
	ws.b = kept
}

// settle records, after a use, when time alone refills every bucket to
// full and whether one is in debt.
func (ws *winSet) settle() {
	if ws == nil {
		return
	}
	ws.debt, ws.full = false, ws.last
	for i := range ws.b {
		wb := &ws.b[i]
		if wb.level < 0 {
			ws.debt = true
		}
		d, _ := wb.pwait(wb.fig, wb.fig, wb.fig, 4*MaxWindow, uint64(wb.per))
		if d >= 4*MaxWindow {
			ws.full = math.MaxInt64
			return
		}
		ws.full = max(ws.full, wb.last+int64(d))
	}
}

// winSetOf returns the window set of entry hash h in sh, created empty if
// absent, advanced to now under at (an admission's windows; nil for a
// reconcile, which advances only what it charges: reconcileWindows). The caller holds sh.mu. Creating
// one may first drop the sets that time alone has refilled (lossless);
// at the bound, when those it visits are not enough, it goes beyond the
// bound (ev.over): a set that holds spend is never evicted, in debt or not
// (a window spent to 0 is a quota held against its key, kept as a debt).
//
// Without windows it creates nothing: nil when there is no set.
//
// A new set takes its entry's clock (last): the latest reading seen, so
// that a clock moving backwards refills nothing there either.
func winSetOf(sh *memShard, bound int, h uint64, windows, at []Window, now, last int64, ev *evicted) *winSet {
	if ws := sh.wins[h]; ws != nil {
		ws.advance(now, at)
		return ws
	}
	if len(windows) == 0 {
		return nil
	}
	if sh.wins == nil {
		sh.wins = make(map[uint64]*winSet)
		sh.winSweepAt = minSweep
	}
	if len(sh.wins) >= sh.winSweepAt {
		for k, ws := range sh.wins {
			if now >= ws.full {
				delete(sh.wins, k)
			}
		}
		sh.winSweepAt = max(minSweep, 2*len(sh.wins))
	}
	if len(sh.wins) >= bound {
		// A set that is not full holds spend against its key (a window
		// spent to 0 is not in debt, but dropping it would give a day's
		// quota back): it is kept, as a debt is. Only full sets go.
		visited := 0
		for k, ws := range sh.wins {
			if visited++; visited > evictVisit {
				break
			}
			if now >= ws.full {
				delete(sh.wins, k)
				if len(sh.wins) < bound {
					break
				}
			}
		}
		if len(sh.wins) >= bound {
			ev.over++
		}
	}
	ws := &winSet{last: last, full: last}
	sh.wins[h] = ws
	return ws
}

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
	// Create the missing buckets first: the stages point into ws.b, which
	// creating may move.
	for _, w := range windows {
		for m, b := range WindowMeters()[scope] {
			if f := w.Figure(b); f > 0 {
				ws.find(uint8(m), int64(w.Per), f, ws.last)
			}
		}
	}
	for i, w := range windows {
		for m, b := range WindowMeters()[scope] {
			f := w.Figure(b)
			if f == 0 {
				continue
			}
			wb := ws.find(uint8(m), int64(w.Per), f, ws.last)
			s := winStage{b: &wb.bucket, rate: f, cap: f, period: uint64(w.Per), bucket: b, window: w.Per, levels: &levels[i]}
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
		if s := &st[i]; s.b.level < s.need {
			return s.b.level >= s.need-ReserveFloor(r, s.cap)
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
func stageWait(r AdmitRequest) time.Duration {
	if r.Reserve > 0 {
		return 0
	}
	return r.MaxWait
}

// decideStages decides over stages in order, then the gauges (g; nil: none
// in force): all are debited only if all have room and every gauge a free
// slot (the caller takes the slots); with maxWait > 0 a request that would
// fit every stage within maxWait is debited all the same (a reservation).
// RetryAfter is the largest of the stages' exact waits, each capped at
// MaxRetryAfter or its window's Per when longer. With floors (withReserve)
// a stage has room only above its floor, and a gauge a free slot only
// above its (gaugeCheck.withReserve): a gauge's refusal sets ByReserve
// when the gauge had a free slot; for a stage's, the caller sets it
// (byReserve).
func decideStages(st []winStage, maxWait time.Duration, g *gaugeCheck) Decision {
	var d Decision
	refused := -1
	for i := range st {
		if st[i].b.level < st[i].need {
			refused = i
			break
		}
	}
	debit := func() {
		for i := range st {
			st[i].b.level -= st[i].debit
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
		w, never := s.b.pwait(s.need, s.rate, s.cap, c+1, s.period)
		d.NeverFits = d.NeverFits || never
		exact = max(exact, w)
		d.RetryAfter = max(d.RetryAfter, min(w, c))
	}
	if maxWait <= 0 || d.NeverFits || exact > maxWait {
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
		d.Remaining = [4]int64{st[0].b.level, st[1].b.level, st[0].b.level, st[1].b.level}
		st = st[2:]
	} else {
		d.Remaining = [4]int64{st[0].b.level, st[1].b.level, st[2].b.level, st[3].b.level}
		st = st[4:]
	}
	for _, s := range st {
		s.levels.set(s.bucket, s.b.level)
	}
}

// perMinuteStages returns the stages of the four per-minute buckets (two
// for a Solo request: ke is then the one entry).
func perMinuteStages(st []winStage, ke, we *entry, kl, wl Limits, tokens int64) []winStage {
	add := func(b *bucket, need, rate int64, name Bucket) {
		st = append(st, winStage{b: b, need: need, debit: need, rate: rate, cap: 2 * rate, period: minute, bucket: name, window: time.Minute})
	}
	add(&ke.req, 1, kl.RequestsPerMinute, KeyRequests)
	add(&ke.tok, tokens, kl.TokensPerMinute, KeyTokens)
	if we != nil {
		add(&we.req, 1, wl.RequestsPerMinute, WorkspaceRequests)
		add(&we.tok, tokens, wl.TokensPerMinute, WorkspaceTokens)
	}
	return st
}

// admitReserved is Admit for a request with a priority reserve
// (AdmitRequest.Reserve) and no windows: admitWindowed over the four
// per-minute stages, kept in an array of its own (no allocation, and no
// cost to admitWindowed's other callers).
func (s *MemoryStore) admitReserved(r AdmitRequest) (Decision, error) {
	var four [4]winStage
	return s.admitWindowed(r, four[:0])
}

// admitWindowed is Admit for figures with windows (gauges too, if any),
// or with a priority reserve (AdmitRequest.Reserve): the per-minute
// buckets, the key's windows, the workspace's and the gauges in one
// decision, under both shards' locks, each above its floor. st is an
// empty slice with room for every stage, or nil (allocated here).
func (s *MemoryStore) admitWindowed(r AdmitRequest, st []winStage) (Decision, error) {
	now := r.Now.UnixNano()
	tokens, input := r.Tokens, max(0, r.InputTokens)
	if st == nil {
		st = make([]winStage, 0, 4+4*(len(r.KeyLimits.Windows)+len(r.WorkspaceLimits.Windows)))
	}
	var ev evicted
	if r.Solo {
		lim := r.WorkspaceLimits
		wh := s.workspaceHash(r.Workspace, r.Model)
		sh, e, ev0 := s.solo(r.Workspace, r.Model, &lim, now)
		ev = ev0
		if r.ID != "" {
			if _, dup := sh.held[r.ID]; dup {
				e.release(sh.epoch.Load())
				sh.mu.Unlock()
				s.noteEvictions(ev)
				return Decision{}, errHeldID
			}
		}
		// A request with a reserve but no windows leaves the windows alone,
		// as any request without windows does.
		var ws *winSet
		if len(lim.Windows) > 0 {
			ws = winSetOf(sh, s.perShard, wh, lim.Windows, lim.Windows, now, e.last, &ev)
		}
		levels := make([]WindowLevels, len(lim.Windows))
		st = perMinuteStages(st, e, nil, lim, lim, tokens)
		st = windowStages(st, ws, lim.Windows, 0, tokens, input, levels)
		var g *gaugeCheck
		if lim.ConcurrentRequests > 0 {
			if r.ID == "" {
				e.release(sh.epoch.Load())
				sh.mu.Unlock()
				return Decision{}, ErrNoAdmissionID
			}
			g = &gaugeCheck{keyCap: lim.ConcurrentRequests, keyNow: sh.inFlight[wh]}
		}
		if r.Reserve > 0 {
			withReserve(st, r.Reserve)
			g.withReserve(r.Reserve)
		}
		d := decideStages(st, stageWait(r), g)
		if r.Reserve > 0 && !d.Allowed && !d.Refused.Concurrent() {
			d.ByReserve = byReserve(st, r.Reserve)
		}
		report(&d, st, true)
		if len(levels) > 0 {
			d.KeyWindows, d.WorkspaceWindows = levels, levels
		}
		if d.Allowed && g != nil {
			sh.take(wh)
			sh.hold(r.ID, heldSlots{key: wh, haveKey: true})
		}
		e.settle(&lim)
		ws.settle()
		e.release(sh.epoch.Load())
		sh.mu.Unlock()
		s.noteEvictions(ev)
		return d, nil
	}
	kc, wc := max(0, r.KeyLimits.ConcurrentRequests), max(0, r.WorkspaceLimits.ConcurrentRequests)
	if (kc > 0 || wc > 0) && r.ID == "" {
		return Decision{}, ErrNoAdmissionID
	}
	pk, wh := s.hashes(r.Key, r.Workspace, r.Model)
	ks, wsh, ke, we, ev := s.lock(r.Key, r.Workspace, r.Model, &r.KeyLimits, &r.WorkspaceLimits, now)
	unlock := func() {
		releasePair(ks, wsh, ke, we)
		wsh.mu.Unlock()
		ks.mu.Unlock()
		s.noteEvictions(ev)
	}
	if r.ID != "" {
		if _, dup := ks.held[r.ID]; dup {
			unlock()
			return Decision{}, errHeldID
		}
	}
	var kw, ww *winSet
	if windowed(r.KeyLimits, r.WorkspaceLimits) { // not for a reserve alone: windows are left alone
		kw = winSetOf(ks, s.perShard, pk, r.KeyLimits.Windows, r.KeyLimits.Windows, now, ke.last, &ev)
		ww = winSetOf(wsh, s.perShard, wh, r.WorkspaceLimits.Windows, r.WorkspaceLimits.Windows, now, we.last, &ev)
	}
	kls, wls := make([]WindowLevels, len(r.KeyLimits.Windows)), make([]WindowLevels, len(r.WorkspaceLimits.Windows))
	st = perMinuteStages(st, ke, we, r.KeyLimits, r.WorkspaceLimits, tokens)
	st = windowStages(st, kw, r.KeyLimits.Windows, 0, tokens, input, kls)
	st = windowStages(st, ww, r.WorkspaceLimits.Windows, 1, tokens, input, wls)
	var g *gaugeCheck
	if kc > 0 || wc > 0 {
		g = &gaugeCheck{keyCap: kc, keyNow: ks.inFlight[pk], wsCap: wc, wsNow: wsh.inFlight[wh]}
	}
	if r.Reserve > 0 {
		withReserve(st, r.Reserve)
		g.withReserve(r.Reserve)
	}
	d := decideStages(st, stageWait(r), g)
	if r.Reserve > 0 && !d.Allowed && !d.Refused.Concurrent() {
		d.ByReserve = byReserve(st, r.Reserve)
	}
	report(&d, st, false)
	if len(kls) > 0 {
		d.KeyWindows = kls
	}
	if len(wls) > 0 {
		d.WorkspaceWindows = wls
	}
	if d.Allowed && g != nil {
		hs := heldSlots{key: pk, ws: wh, haveKey: kc > 0, haveWS: wc > 0}
		if hs.haveKey {
			ks.take(pk)
		}
		if hs.haveWS {
			wsh.take(wh)
		}
		ks.hold(r.ID, hs)
	}
	ke.settle(&r.KeyLimits)
	we.settle(&r.WorkspaceLimits)
	kw.settle()
	ww.settle()
	unlock()
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
			wb := ws.find(uint8(m), int64(w.Per), f, ws.last)
			wb.refill(now)
			wb.adjust(delta, wb.fig)
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
		wh := s.workspaceHash(r.Workspace, r.Model)
		sh, e, ev := s.solo(r.Workspace, r.Model, &lim, now)
		reconcileEntry(e, &r, WorkspaceTokens, lim)
		ws := winSetOf(sh, s.perShard, wh, lim.Windows, nil, now, e.last, &ev)
		reconcileWindows(ws, r, lim.Windows, 0, now)
		e.settle(&lim)
		ws.settle()
		e.release(sh.epoch.Load())
		if hs, ok := sh.unhold(r.ID); ok {
			sh.give(hs.key)
		}
		sh.mu.Unlock()
		s.noteEvictions(ev)
		return
	}
	pk, wh := s.hashes(r.Key, r.Workspace, r.Model)
	ks, wsh, ke, we, ev := s.lock(r.Key, r.Workspace, r.Model, &r.KeyLimits, &r.WorkspaceLimits, now)
	reconcileEntry(ke, &r, KeyTokens, r.KeyLimits)
	reconcileEntry(we, &r, WorkspaceTokens, r.WorkspaceLimits)
	kw := winSetOf(ks, s.perShard, pk, r.KeyLimits.Windows, nil, now, ke.last, &ev)
	ww := winSetOf(wsh, s.perShard, wh, r.WorkspaceLimits.Windows, nil, now, we.last, &ev)
	reconcileWindows(kw, r, r.KeyLimits.Windows, 0, now)
	reconcileWindows(ww, r, r.WorkspaceLimits.Windows, 1, now)
	ke.settle(&r.KeyLimits)
	we.settle(&r.WorkspaceLimits)
	kw.settle()
	ww.settle()
	releasePair(ks, wsh, ke, we)
	releaseSlots(ks, wsh, r.ID)
	wsh.mu.Unlock()
	ks.mu.Unlock()
	s.noteEvictions(ev)
}

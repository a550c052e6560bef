package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/calendar"
	"github.com/redis/go-redis/v9"
)

// Quotas (llmrate.QuotaStore): Unlimited per-minute figures, calendar and
// session windows, and the plan's windows and gauges lent to a model
// entry's request. An admission or a reconcile with any of them runs
// scripts of its own (admitq.lua, reconcileq.lua), still one round trip;
// every other one runs the script it ran before, unchanged (so their cost
// is unchanged: bench/quota-redis-cost.txt).
//
// Lua has no zone data. A calendar window's periods are computed here
// (internal/calendar, memoized per calendar and zone) around the server's
// time as this store last saw it (each quota script returns the server's
// TIME; WithClock's clock instead when set), never the limiter's
// AdmitRequest.Now: the period before, the period in force and the next
// one go to the script, which keeps per bucket what was spent and the
// [start, end) it recorded, and moves to a new period only once the
// server's clock has passed the recorded end. So two processes with
// different tzdata, or a replica promoted with its own clock, never reset
// one period twice. The server's time may be off from this store's idea
// of it by less than one period (a calendar day: 23 hours at least) in
// either direction; beyond that (a host clock a day off on its very first
// call, before any reply taught it the server's time) the script applies
// nothing and answers with the server's time, counted in Skews, and the
// admission is sent once more with periods around it (with WithClock set
// the store's periods are that clock's, and the admission fails open with
// an error instead).
//
// A session window's bucket records its opening instant (server time) at
// the first admission it admits, and is full again Per later. A calendar
// or session bucket expires a minute after its period's or session's end.
//
// Waits: a request that a calendar or session bucket has no room for now
// is refused, never given a reservation (its room comes at a period's
// start or a session's end, and a reservation debited now would not land
// there): RetryAfter is the time to that boundary, not capped.
//
// Key names: a calendar bucket is its entry's name, ":qc", the calendar
// (1 day, 2 week, 3 month), a keyed hash of the zone's name and the
// meter's letter; a session bucket ":qs", Per in ms and the meter's
// letter. A lent window or gauge is the default buckets' (Model "").

var (
	//go:embed quota.lua
	quotaLua string
	//go:embed admitq.lua
	admitQLua string
	//go:embed reconcileq.lua
	reconcileQLua string

	admitQScript          = redis.NewScript(arithLua + admitOneLua + xPlainLua + windowLua + quotaLua + admitQLua)
	admitQLeaseScript     = redis.NewScript(arithLua + entryLua + admitOneLua + leaseBucketLua + xLeaseLua + windowLua + quotaLua + admitQLua)
	reconcileQScript      = redis.NewScript(arithLua + entryLua + wPlainLua + windowLua + quotaLua + reconcileQLua)
	reconcileQLeaseScript = redis.NewScript(arithLua + entryLua + leaseBucketLua + wLeaseLua + windowLua + quotaLua + reconcileQLua)
)

var (
	_ llmrate.QuotaStore = (*Store)(nil)
	_ llmrate.Peeker     = (*Store)(nil)
)

// Quotas implements llmrate.QuotaStore.
func (*Store) Quotas() {}

// errSkew is an admission failed open: the server's clock was more than a
// period away from this store's idea of it (Skews).
var errSkew = errors.New("redisstore: the server's clock is more than a calendar period from this store's; failing open")

// quotaState is what the quota path keeps: the server's time as last
// seen, the calendar caches and the skew count.
type quotaState struct {
	mu  sync.Mutex
	srv int64     // the server's time last seen, µs (0: none yet)
	at  time.Time // when it was seen, by this host's monotonic clock

	cur, prev, next calendar.Cache // the period in force; the one before; the one after
	skews           atomic.Int64
}

// Skews returns how many quota admissions were sent again (failed open,
// with WithClock set), and how many reconciles dropped a calendar window's
// charge, because the server's clock was more than a calendar period from
// this store's idea of it.
func (s *Store) Skews() int64 { return s.quota.skews.Load() }

// serverNow is the server's time as this store estimates it: WithClock's
// clock when set; else the server's time last seen plus the time elapsed
// here since; else (no reply yet) this host's clock.
func (s *Store) serverNow() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	q := &s.quota
	q.mu.Lock()
	srv, at := q.srv, q.at
	q.mu.Unlock()
	if srv == 0 {
		return time.Now()
	}
	return time.UnixMicro(srv).Add(time.Since(at))
}

// sawServer records a script's reply's server time, µs.
func (s *Store) sawServer(us int64) {
	if s.clock != nil || us <= 0 {
		return
	}
	q := &s.quota
	q.mu.Lock()
	q.srv, q.at = us, time.Now()
	q.mu.Unlock()
}

// periods returns the bounds of the calendar periods of w around t, in
// µs: the one before, the one in force and the next, [p0, p1), [p1, p2),
// [p2, p3).
func (s *Store) periods(w llmrate.Window, t time.Time) [4]int64 {
	q := &s.quota
	k := calendar.Kind(w.Calendar)
	s1, e1 := q.cur.Period(k, w.Zone, t)
	s0, _ := q.prev.Period(k, w.Zone, s1.Add(-time.Second))
	_, e2 := q.next.Period(k, w.Zone, e1)
	return [4]int64{s0.UnixMicro(), s1.UnixMicro(), e1.UnixMicro(), e2.UnixMicro()}
}

// quotaLimits reports whether figures use what only the quota path keeps:
// an Unlimited per-minute figure, a calendar or session window.
func quotaLimits(l llmrate.Limits) bool {
	if l.RequestsPerMinute == llmrate.Unlimited || l.TokensPerMinute == llmrate.Unlimited {
		return true
	}
	for _, w := range l.Windows {
		if w.Calendar != 0 || w.Session {
			return true
		}
	}
	return false
}

// lent reports whether a plan's figures (nil: none) lend windows or a
// gauge.
func lent(p *llmrate.Limits) bool {
	return p != nil && (len(p.Windows) > 0 || p.ConcurrentRequests > 0)
}

// planOf returns the plan's figures p points to (the zero Limits for nil).
func planOf(p *llmrate.Limits) llmrate.Limits {
	if p == nil {
		return llmrate.Limits{}
	}
	return *p
}

// quotaAdmit reports whether r goes to admitq.lua.
func quotaAdmit(r *llmrate.AdmitRequest) bool {
	return quotaLimits(r.KeyLimits) || quotaLimits(r.WorkspaceLimits) || lent(r.KeyPlan) || lent(r.WorkspacePlan)
}

// quotaReconcile reports whether r goes to reconcileq.lua.
func quotaReconcile(r *llmrate.ReconcileRequest) bool {
	return quotaLimits(r.KeyLimits) || quotaLimits(r.WorkspaceLimits) || lent(r.KeyPlan) || lent(r.WorkspacePlan)
}

// Receipts of quota admissions: the server's instant of the admission, in
// µs, after receiptAt ("g" first when it took slots), so that its
// reconcile lands in the admission's period (the limiter's
// ReconcileRequest.Admitted is its own clock's, not the server's).
const receiptAt = "@"

// quotaReceipt is the Receipt of a quota admission decided at us (µs).
func quotaReceipt(gauged bool, us int64) string {
	b := make([]byte, 0, 24)
	if gauged {
		b = append(b, receiptGauged...)
	}
	b = append(b, receiptAt...)
	return string(strconv.AppendInt(b, us, 10))
}

// receiptInstant returns the instant (µs) a quota admission's receipt
// holds, 0 for none (any other receipt).
func receiptInstant(receipt string) int64 {
	receipt = strings.TrimPrefix(receipt, receiptGauged)
	if !strings.HasPrefix(receipt, receiptAt) {
		return 0
	}
	us, err := strconv.ParseInt(receipt[len(receiptAt):], 10, 64)
	if err != nil {
		return 0
	}
	return us
}

// gaugedReceipt reports whether receipt is that of an admission that took
// slots in Redis.
func gaugedReceipt(receipt string) bool { return strings.HasPrefix(receipt, receiptGauged) }

// rate is a per-minute figure as the quota scripts read it: an Unlimited
// one is 0 (no bucket).
func rate(f int64) int64 {
	if f == llmrate.Unlimited {
		return 0
	}
	return f
}

// kindOf is a window's kind as the quota scripts read it.
func kindOf(w llmrate.Window) int {
	switch {
	case w.Calendar != llmrate.NoCalendar:
		return 1
	case w.Session:
		return 2
	}
	return 0
}

// Scopes of a quota request's window bucket: the Decision slice its level
// goes to.
const (
	scopeKey = iota
	scopeWorkspace
	scopeKeyPlan
	scopeWorkspacePlan
)

// quotaName returns the name of window w's meter bucket next to entry e:
// windowEntry's for a rolling window; a calendar or session bucket's
// (see the notes above).
func (s *Store) quotaName(e string, w llmrate.Window, meter int) string {
	switch kindOf(w) {
	case 1:
		m := s.macs.Get().(*mac)
		defer s.macs.Put(m)
		b := make([]byte, 0, len(e)+32)
		b = append(append(b, e...), ":qc"...)
		b = strconv.AppendInt(b, int64(w.Calendar), 10)
		b = m.appendHash(b, 'z', w.Zone.String())
		return string(append(b, meterLetters[meter]))
	case 2:
		b := make([]byte, 0, len(e)+20)
		b = append(append(b, e...), ":qs"...)
		b = strconv.AppendInt(b, w.Per.Milliseconds(), 10)
		return string(append(b, meterLetters[meter]))
	}
	return windowEntry(e, w.Per, meter)
}

// quotaBuckets lists a quota request's window buckets in the order they
// are checked: the key's (the plan's lent windows, then the entry's),
// then the workspace's (likewise), each meter in WindowMeters order. A
// lent window's bucket is the default buckets' (entries k0, w0). A Solo
// request's key and workspace sets are one (WorkspacePlan's, then
// WorkspaceLimits'), kept as the workspace's and named as the key's.
func (s *Store) quotaBuckets(k, w, k0, w0 string, kl, wl, kp, wp llmrate.Limits, solo bool, now time.Time) []wbucket {
	var out []wbucket
	add := func(entry string, ws []llmrate.Window, scope, named int, isLent bool) {
		for i, win := range ws {
			var p [4]int64
			if win.Calendar != llmrate.NoCalendar {
				p = s.periods(win, now)
			}
			for m, b := range llmrate.WindowMeters()[named] {
				if win.Figure(b) == 0 {
					continue
				}
				out = append(out, wbucket{name: s.quotaName(entry, win, m), code: b, meter: m, win: win, scope: scope, index: i, lent: isLent, p: p})
			}
		}
	}
	if solo {
		add(w0, wp.Windows, scopeWorkspacePlan, 0, true)
		add(w, wl.Windows, scopeWorkspace, 0, false)
		return out
	}
	add(k0, kp.Windows, scopeKeyPlan, 0, true)
	add(k, kl.Windows, scopeKey, 0, false)
	add(w0, wp.Windows, scopeWorkspacePlan, 1, true)
	add(w, wl.Windows, scopeWorkspace, 1, false)
	return out
}

// quotaCall is what one quota script call names: its entries, gauges and
// window buckets.
type quotaCall struct {
	k, w, k0, w0, kg, wg, pkg, pwg string
	bs                             []wbucket
}

// quotaKeys returns the call's KEYS (admitq.lua, reconcileq.lua) up to
// and including the window buckets whose names pass keep.
func (s *Store) quotaKeys(c *quotaCall, keep func(int) bool) []string {
	keys := make([]string, 0, 9+len(c.bs))
	keys = append(keys, c.k, c.w, c.kg, c.wg)
	if s.leases != nil {
		keys = append(keys, c.k+":l", c.w+":l")
	}
	keys = append(keys, c.pkg, c.pwg)
	for i, b := range c.bs {
		if keep(i) {
			keys = append(keys, b.name)
		}
	}
	return keys
}

// newQuotaCall names r's entries, gauges and window buckets.
func (s *Store) newQuotaCall(key, ws, model string, kl, wl, kp, wp llmrate.Limits, solo bool) *quotaCall {
	c := &quotaCall{}
	c.k, c.w = s.names(key, ws, model, solo)
	c.k0, c.w0 = c.k, c.w
	if model != "" {
		c.k0, c.w0 = s.names(key, ws, "", solo)
	}
	c.kg, c.wg = gaugeNames(c.k, c.w)
	c.pkg, c.pwg = gaugeNames(c.k0, c.w0)
	c.bs = s.quotaBuckets(c.k, c.w, c.k0, c.w0, kl, wl, kp, wp, solo, s.serverNow())
	return c
}

// gaugeFigures returns the figures of a quota request's four gauges as
// admitq.lua reads them: the entry's key and workspace gauges (a Solo
// request's one gauge its workspace's, sent as the key's, as admitw.lua
// has it), and the plan's (likewise).
func gaugeFigures(kl, wl, kp, wp llmrate.Limits, solo bool) (kc, wc, pkc, pwc int64) {
	kc, wc = max(0, kl.ConcurrentRequests), max(0, wl.ConcurrentRequests)
	pkc, pwc = max(0, kp.ConcurrentRequests), max(0, wp.ConcurrentRequests)
	if solo {
		kc, wc, pkc, pwc = wc, 0, pwc, 0
	}
	return kc, wc, pkc, pwc
}

// admitQ decides a quota admission (admitq.lua) in one round trip, never
// batched nor decided on a lease; with maxWait -1 it is a peek (Peek):
// levels only, nothing written.
func (s *Store) admitQ(ctx context.Context, r llmrate.AdmitRequest, peek bool) (llmrate.Decision, error) {
	// One WithTimeout for both sends: the second is no call of its own.
	ctx, rel := s.bound(ctx, time.Now())
	defer rel.Release()
	d, err := s.admitQOnce(ctx, r, peek)
	if errors.Is(err, errSkew) && s.clock == nil {
		// The skewed call applied nothing, and its reply taught the store
		// the server's time: sent again, its periods are the server's.
		d, err = s.admitQOnce(ctx, r, peek)
	}
	return d, err
}

// admitQOnce is one call of admitQ: errSkew when the server's clock was
// more than a period from the store's idea of it (counted in Skews).
func (s *Store) admitQOnce(ctx context.Context, r llmrate.AdmitRequest, peek bool) (llmrate.Decision, error) {
	kp, wp := planOf(r.KeyPlan), planOf(r.WorkspacePlan)
	kc, wc, pkc, pwc := gaugeFigures(r.KeyLimits, r.WorkspaceLimits, kp, wp, r.Solo)
	g := kc+wc+pkc+pwc > 0
	if peek {
		r.ID = ""
	} else if g && r.ID == "" {
		return llmrate.Decision{}, llmrate.ErrNoAdmissionID
	}
	if !s.up(ctx) {
		return s.quotaLocal(ctx, r, errDown, peek)
	}
	c := s.newQuotaCall(r.Key, r.Workspace, r.Model, r.KeyLimits, r.WorkspaceLimits, kp, wp, r.Solo)
	bs := c.bs
	keys := s.quotaKeys(c, func(int) bool { return true })
	script := admitQScript
	if s.leases != nil {
		script = admitQLeaseScript
	}
	spec := make([]byte, 0, 72*len(bs))
	for _, b := range bs {
		spec = appendFloats(spec, float64(b.code), float64(b.meter), float64(b.win.Figure(b.code)), float64(b.win.Per.Microseconds()),
			float64(kindOf(b.win)), float64(b.p[0]), float64(b.p[1]), float64(b.p[2]), float64(b.p[3]))
	}
	if r.ID != "" {
		keys = append(keys, idKey(c.w, 'q', r.ID))
	}
	q := r // the per-minute figures as the script reads them
	q.KeyLimits.RequestsPerMinute, q.KeyLimits.TokensPerMinute = rate(r.KeyLimits.RequestsPerMinute), rate(r.KeyLimits.TokensPerMinute)
	q.WorkspaceLimits.RequestsPerMinute, q.WorkspaceLimits.TokensPerMinute = rate(r.WorkspaceLimits.RequestsPerMinute), rate(r.WorkspaceLimits.TokensPerMinute)
	wait := max(0, r.MaxWait.Microseconds())
	if peek {
		wait = -1
	}
	args := []any{s.nowArg(), admitArg(q), admitIDLife.Milliseconds(), wait,
		kc, wc, s.gauges.ttl.Milliseconds(), r.ID, max(0, r.InputTokens), string(spec), string(appendFloats(nil, float64(pkc), float64(pwc)))}
	if r.Reserve > 0 && !peek {
		fl := reserveFloors(r, bs, kc, wc)
		args = append(args, fl+string(appendFloats(nil, float64(llmrate.ReserveFloor(r.Reserve, pkc)), float64(llmrate.ReserveFloor(r.Reserve, pwc)))))
	}
	v, err := s.run(ctx, script, keys, args, r.ID != "")
	if err != nil {
		return s.quotaLocal(ctx, r, err, peek)
	}
	if vs, ok := v.([]any); ok && len(vs) == 2 {
		if res, err := int64s(v, 2); err == nil && res[0] == -1 {
			s.sawServer(res[1])
			s.quota.skews.Add(1)
			return llmrate.Decision{}, errSkew
		}
	}
	res, err := int64s(v, 12+2*len(bs))
	if err != nil {
		return s.quotaLocal(ctx, r, s.failed(err), peek)
	}
	s.sawServer(res[10])
	d := quotaDecision(&r, bs, res)
	if peek {
		return llmrate.Decision{Remaining: d.Remaining, KeyWindows: d.KeyWindows, WorkspaceWindows: d.WorkspaceWindows, Plan: d.Plan}, nil
	}
	s.follow(&r, &d)
	if d.Allowed {
		d.Receipt = quotaReceipt(g, res[10])
	}
	if d.Allowed && g {
		s.hold(r.ID, slots{w: c.w, kg: c.kg, wg: c.wg, key: kc > 0, ws: wc > 0, pkg: c.pkg, pwg: c.pwg, pkey: pkc > 0, pws: pwc > 0})
	}
	return d, nil
}

// quotaLocal is admitLocal for a quota admission or a peek.
func (s *Store) quotaLocal(ctx context.Context, r llmrate.AdmitRequest, err error, peek bool) (llmrate.Decision, error) {
	if !peek {
		return s.admitLocal(ctx, r, err)
	}
	if s.fallback == nil {
		return llmrate.Decision{}, err
	}
	var fb any = s.fallback
	if p, ok := fb.(llmrate.Peeker); ok {
		return p.Peek(ctx, r)
	}
	return llmrate.Decision{}, err
}

// quotaDecision reads admitq.lua's reply res for r's window buckets bs.
func quotaDecision(r *llmrate.AdmitRequest, bs []wbucket, res []int64) llmrate.Decision {
	d := llmrate.Decision{
		Allowed:    res[0] == 1,
		Refused:    llmrate.Bucket(res[1]),
		RetryAfter: time.Duration(res[2]) * time.Microsecond,
		NeverFits:  res[3]&1 == 1,
		ByReserve:  res[3]&2 != 0,
		Remaining:  [4]int64{res[4], res[5], res[6], res[7]},
		Wait:       time.Duration(res[8]) * time.Microsecond,
	}
	if !d.Allowed {
		switch {
		case res[9] > 0:
			b := bs[res[9]-1]
			d.Window, d.Calendar, d.Session, d.Lent = b.win.Per, b.win.Calendar, b.win.Session, b.lent
			if b.win.Calendar != llmrate.NoCalendar {
				d.Zone = b.win.Zone.String()
			}
		case d.Refused.Concurrent():
			d.Lent = res[11] == 1
		default:
			d.Window = time.Minute
		}
	}
	var kpw, wpw []llmrate.WindowLevels
	d.KeyWindows, d.WorkspaceWindows, kpw, wpw = quotaLevels(r, bs, res[12:])
	if kpw != nil || wpw != nil {
		d.Plan = &llmrate.PlanLevels{KeyWindows: kpw, WorkspaceWindows: wpw}
	}
	return d
}

// quotaLevels returns the Decision's four window level sets from the
// levels and resets of bs: for a Solo request, the one set's levels in
// the key's and the workspace's slices alike.
func quotaLevels(r *llmrate.AdmitRequest, bs []wbucket, lv []int64) (kw, ww, kpw, wpw []llmrate.WindowLevels) {
	mk := func(ws []llmrate.Window) []llmrate.WindowLevels {
		if len(ws) == 0 {
			return nil
		}
		return make([]llmrate.WindowLevels, len(ws))
	}
	kw, ww, kpw, wpw = mk(r.KeyLimits.Windows), mk(r.WorkspaceLimits.Windows), mk(planOf(r.KeyPlan).Windows), mk(planOf(r.WorkspacePlan).Windows)
	sets := [4][]llmrate.WindowLevels{kw, ww, kpw, wpw}
	put := func(dst []llmrate.WindowLevels, b wbucket, level, reset int64) {
		if b.index >= len(dst) {
			return
		}
		setLevel(&dst[b.index], b.meter, level)
		// A window's meters share a calendar period; a session's meters
		// may have opened apart (a late debit opens one meter's): the
		// latest end of those open.
		if at := reset * 1000; reset > 0 && at > dst[b.index].Reset {
			dst[b.index].Reset = at
		}
	}
	for i, b := range bs {
		put(sets[b.scope], b, lv[2*i], lv[2*i+1])
		if r.Solo {
			put(sets[b.scope-1], b, lv[2*i], lv[2*i+1]) // the key's view of the one set
		}
	}
	return kw, ww, kpw, wpw
}

// Peek implements llmrate.Peeker: r's levels in one read (admitq.lua run
// as a peek: nothing is written, no slot taken, no session opened); from
// the local fallback while Redis is down, when it has one.
func (s *Store) Peek(ctx context.Context, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	return s.admitQ(ctx, r, true)
}

// reconcileQ is Reconcile for a quota admission (reconcileq.lua): the
// per-minute charge (none for an Unlimited figure), each window bucket's
// (ReconcileRequest.WindowDelta; a calendar or session bucket's in the
// admission's period, see reconcileq.lua) and, when release is set, the
// release of the admission's slots (the plan's gauges' too), in one call,
// applied at most once.
func (s *Store) reconcileQ(ctx context.Context, r llmrate.ReconcileRequest, release, charge bool) error {
	c := s.newQuotaCall(r.Key, r.Workspace, r.Model, r.KeyLimits, r.WorkspaceLimits, planOf(r.KeyPlan), planOf(r.WorkspacePlan), r.Solo)
	at := receiptInstant(r.Receipt) // the server's instant of the admission; 0 (none): now
	spec := appendFloats(make([]byte, 0, 8+64*len(c.bs)), float64(at))
	delta := make([]int64, len(c.bs))
	for i, b := range c.bs {
		d := r.WindowDelta(b.code, b.win)
		if charge && (b.code == llmrate.KeyRequests || b.code == llmrate.WorkspaceRequests) {
			d = 1 // a fallback admission's charge: its request (charges.go)
		}
		delta[i] = d
		p := b.p
		if kindOf(b.win) == 2 {
			// Every meter of a session window goes, those with no delta
			// too: a late debit opens the session for all (p0 names the
			// window: its scope and index).
			p[0] = int64(4*b.index + b.scope + 1)
		} else if d == 0 {
			continue
		}
		spec = appendFloats(spec, float64(b.win.Figure(b.code)), float64(b.win.Per.Microseconds()), float64(d),
			float64(kindOf(b.win)), float64(p[0]), float64(p[1]), float64(p[2]), float64(p[3]))
	}
	keys := s.quotaKeys(c, func(i int) bool { return delta[i] != 0 || kindOf(c.bs[i].win) == 2 })
	script := reconcileQScript
	if s.leases != nil {
		script = reconcileQLeaseScript
	}
	if r.ID != "" {
		keys = append(keys, idKey(c.w, reconcileKind(charge), r.ID))
	}
	args := append(quotaReconcileArgs(s.nowArg(), r, charge), r.ID, soloArg(release), string(spec))
	if s.leases != nil {
		own, ret, done := s.leasesBack(c.k, c.w, r)
		defer done()
		args = append(args, own[0], ret[0], ret[1], ret[2], ret[3], own[1])
	}
	v, err := s.run(ctx, script, keys, args, r.ID != "")
	if n, ok := v.(int64); ok && n == 2 {
		s.quota.skews.Add(1)
	}
	return err
}

// quotaReconcileArgs is reconcileArgs with an Unlimited figure sent as 0
// and its charge as the estimate (nothing to change: it has no bucket).
func quotaReconcileArgs(now string, r llmrate.ReconcileRequest, charge bool) []any {
	args := reconcileArgs(now, r, charge)
	if r.KeyLimits.TokensPerMinute == llmrate.Unlimited {
		args[2] = r.Estimate
	}
	if r.WorkspaceLimits.TokensPerMinute == llmrate.Unlimited {
		args[3] = r.Estimate
	}
	args[4], args[5] = rate(r.KeyLimits.RequestsPerMinute), rate(r.KeyLimits.TokensPerMinute)
	args[6], args[7] = rate(r.WorkspaceLimits.RequestsPerMinute), rate(r.WorkspaceLimits.TokensPerMinute)
	return args
}

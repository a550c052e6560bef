package redisstore

import (
	"context"
	_ "embed"
	"encoding/binary"
	"math"
	"strconv"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/redis/go-redis/v9"
)

// Windows (llmrate.Limits Windows). An admission or a reconcile whose
// figures carry windows runs scripts of its own (admitw.lua,
// reconcilew.lua), still one round trip: the four per-minute buckets, every
// window bucket and the gauges in one atomic step, all or nothing. An
// admission with a priority reserve runs admitw.lua too, windows or not,
// with its floors (reserveFloors); its reconcile is as without a reserve.
// Every other admission and reconcile runs the scripts it ran before,
// unchanged.
// Such an admission bypasses batching and leases (with WithLeases it is
// decided in Redis against the levels the lease scripts keep, as a gauged
// one is), and its reconcile goes to Redis in one call that also applies
// the per-minute charge, releases its slots and, before a debit, returns
// this process's leases on its entries (leasesBack).

var (
	//go:embed window.lua
	windowLua string
	//go:embed admitw.lua
	admitWLua string
	//go:embed reconcilew.lua
	reconcileWLua string
	//go:embed wplain.lua
	wPlainLua string
	//go:embed wlease.lua
	wLeaseLua string

	admitWScript          = redis.NewScript(arithLua + admitOneLua + xPlainLua + windowLua + admitWLua)
	admitWLeaseScript     = redis.NewScript(arithLua + entryLua + admitOneLua + leaseBucketLua + xLeaseLua + windowLua + admitWLua)
	reconcileWScript      = redis.NewScript(arithLua + entryLua + wPlainLua + windowLua + reconcileWLua)
	reconcileWLeaseScript = redis.NewScript(arithLua + entryLua + leaseBucketLua + wLeaseLua + windowLua + reconcileWLua)
)

// windowed reports whether r's figures carry windows.
func windowed(kl, wl llmrate.Limits) bool {
	return len(kl.Windows) > 0 || len(wl.Windows) > 0
}

// admitsW reports whether r is admitted by admitw.lua (windows, or a
// priority reserve), whose identity records are of kind 'x', not 'a'.
func admitsW(r *llmrate.AdmitRequest) bool {
	return r.Reserve > 0 || windowed(r.KeyLimits, r.WorkspaceLimits)
}

// wbucket is one window bucket of a request: a non-zero meter of one of
// its windows.
type wbucket struct {
	name  string         // its entry
	code  llmrate.Bucket // the Bucket that names it in a refusal
	meter int            // its index in llmrate.WindowMeters()[scope]: requests, tokens, input, output
	win   llmrate.Window
	scope int // 0: one of KeyLimits.Windows, 1: one of WorkspaceLimits.Windows (quota.go: 2, 3 the plan's)
	index int // its window's index there

	lent bool     // quota.go: a plan's window lent to a model entry's request
	p    [4]int64 // quota.go: a calendar window's periods around the server's time, µs
}

// meterLetters end a window bucket's entry name, by meter.
const meterLetters = "rtio"

// windowEntry returns the name of the entry of window w's meter (0..3)
// bucket next to entry e (the key's or the workspace's entry of the
// request's Model): e, ":v", w.Per in ms and the meter's letter. So a
// window bucket is named by (scope, Model, meter, Per), in e's hash slot,
// with e's keyed hashes only.
func windowEntry(e string, per time.Duration, meter int) string {
	b := make([]byte, 0, len(e)+16)
	b = append(append(b, e...), ":v"...)
	b = strconv.AppendInt(b, per.Milliseconds(), 10)
	return string(append(b, meterLetters[meter]))
}

// windowBuckets lists r's window buckets in the order they are checked:
// the key's windows, then the workspace's, each meter in WindowMeters
// order. A Solo request's two sets are one (its figures are equal), kept
// once, next to the workspace's entry, and named as the key's in a refusal
// (the key's windows are checked first).
func windowBuckets(k, w string, kl, wl llmrate.Limits, solo bool) []wbucket {
	var out []wbucket
	add := func(entry string, ws []llmrate.Window, scope, named int) {
		for i, win := range ws {
			for m, b := range llmrate.WindowMeters()[named] {
				if win.Figure(b) == 0 {
					continue
				}
				out = append(out, wbucket{name: windowEntry(entry, win.Per, m), code: b, meter: m, win: win, scope: scope, index: i})
			}
		}
	}
	if solo {
		add(w, wl.Windows, 1, 0)
		return out
	}
	add(k, kl.Windows, 0, 0)
	add(w, wl.Windows, 1, 1)
	return out
}

// admitW decides an admission whose figures carry windows, or that has a
// priority reserve (llmrate.AdmitRequest.Reserve: its floors go as
// admitw.lua's ARGV[11]), in one round trip, never batched nor decided on
// a lease.
func (s *Store) admitW(ctx context.Context, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	g := gauged(r.KeyLimits, r.WorkspaceLimits)
	if g && r.ID == "" {
		return llmrate.Decision{}, llmrate.ErrNoAdmissionID
	}
	if !s.up(ctx) {
		return s.admitLocal(ctx, r, errDown)
	}
	k, w := s.names(r.Key, r.Workspace, r.Model, r.Solo)
	kg, wg := gaugeNames(k, w)
	kc, wc := max(0, r.KeyLimits.ConcurrentRequests), max(0, r.WorkspaceLimits.ConcurrentRequests)
	if r.Solo {
		kc, wc = wc, 0
	}
	bs := windowBuckets(k, w, r.KeyLimits, r.WorkspaceLimits, r.Solo)
	keys := make([]string, 0, 7+len(bs))
	keys = append(keys, k, w, kg, wg)
	script := admitWScript
	if s.leases != nil {
		keys = append(keys, k+":l", w+":l")
		script = admitWLeaseScript
	}
	spec := make([]byte, 0, 32*len(bs))
	for _, b := range bs {
		keys = append(keys, b.name)
		spec = appendFloats(spec, float64(b.code), float64(b.meter), float64(b.win.Figure(b.code)), float64(b.win.Per.Microseconds()))
	}
	if r.ID != "" {
		// A record of its own kind: its levels (5 + one per window bucket
		// doubles) could have the length of admit.lua's replies, which
		// that script returns as they are, so the plain path must never
		// read one (an admission resent after its figures lost their
		// windows is decided afresh).
		keys = append(keys, idKey(w, 'x', r.ID))
	}
	args := []any{s.nowArg(), admitArg(r), admitIDLife.Milliseconds(), max(0, r.MaxWait.Microseconds()),
		kc, wc, s.gauges.ttl.Milliseconds(), r.ID, max(0, r.InputTokens), string(spec)}
	if r.Reserve > 0 {
		args = append(args, reserveFloors(r, bs, kc, wc))
	}
	v, err := s.run(ctx, script, keys, args, r.ID != "")
	if err != nil {
		return s.admitLocal(ctx, r, err)
	}
	res, err := int64s(v, 10+len(bs))
	if err != nil {
		return s.admitLocal(ctx, r, s.failed(err))
	}
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
			d.Window = bs[res[9]-1].win.Per
		case !d.Refused.Concurrent():
			d.Window = time.Minute
		}
	}
	d.KeyWindows, d.WorkspaceWindows = windowLevels(r, bs, res[10:])
	s.follow(&r, &d)
	if d.Allowed && kc+wc > 0 {
		d.Receipt = receiptGauged
		s.hold(r.ID, slots{w: w, kg: kg, wg: wg, key: kc > 0, ws: wc > 0})
	}
	return d, nil
}

// reserveFloors is admitw.lua's ARGV[11] for a request with a priority
// reserve (llmrate.AdmitRequest.Reserve, at most llmrate.MaxReserve): the
// floor of each of its four per-minute buckets (capacity twice the
// figure), of each window bucket in bs (capacity its figure) and of its two
// gauges (kc, wc as the script gets them), each llmrate.ReserveFloor,
// exact in integers here; as doubles, exact too (every floor is at most
// its capacity, at most 2 × 10^12, below 2^53). A Solo request's key
// buckets are its workspace's.
func reserveFloors(r llmrate.AdmitRequest, bs []wbucket, kc, wc int64) string {
	res := r.Reserve // ReserveFloor decides one above MaxReserve as MaxReserve
	kl, wl := r.KeyLimits, r.WorkspaceLimits
	if r.Solo {
		kl = wl
	}
	fl := func(c int64) float64 { return float64(llmrate.ReserveFloor(res, c)) }
	b := make([]byte, 0, 8*(6+len(bs)))
	b = appendFloats(b, fl(2*kl.RequestsPerMinute), fl(2*kl.TokensPerMinute), fl(2*wl.RequestsPerMinute), fl(2*wl.TokensPerMinute))
	for _, w := range bs {
		b = appendFloats(b, fl(w.win.Figure(w.code)))
	}
	return string(appendFloats(b, fl(kc), fl(wc)))
}

// windowLevels returns Decision.KeyWindows and WorkspaceWindows from the
// levels of bs: for a Solo request, the one set's levels in both.
func windowLevels(r llmrate.AdmitRequest, bs []wbucket, levels []int64) (kw, ww []llmrate.WindowLevels) {
	if n := len(r.KeyLimits.Windows); n > 0 {
		kw = make([]llmrate.WindowLevels, n)
	}
	if n := len(r.WorkspaceLimits.Windows); n > 0 {
		ww = make([]llmrate.WindowLevels, n)
	}
	for i, b := range bs {
		dst := [2][]llmrate.WindowLevels{kw, ww}[b.scope]
		if b.index < len(dst) {
			setLevel(&dst[b.index], b.meter, levels[i])
		}
		if r.Solo && b.index < len(kw) {
			setLevel(&kw[b.index], b.meter, levels[i])
		}
	}
	return kw, ww
}

func setLevel(l *llmrate.WindowLevels, meter int, v int64) {
	switch meter {
	case 0:
		l.Requests = v
	case 1:
		l.Tokens = v
	case 2:
		l.InputTokens = v
	default:
		l.OutputTokens = v
	}
}

// reconcileW is Reconcile for figures that carry windows (reconcilew.lua):
// the per-minute charge, each window bucket's (ReconcileRequest
// WindowDelta) and, when release is set, the release of the admission's
// slots, in one call, applied at most once.
func (s *Store) reconcileW(ctx context.Context, r llmrate.ReconcileRequest, release, charge bool) error {
	k, w := s.names(r.Key, r.Workspace, r.Model, r.Solo)
	kg, wg := gaugeNames(k, w)
	bs := windowBuckets(k, w, r.KeyLimits, r.WorkspaceLimits, r.Solo)
	keys := make([]string, 0, 7+len(bs))
	keys = append(keys, k, w, kg, wg)
	script := reconcileWScript
	if s.leases != nil {
		keys = append(keys, k+":l", w+":l")
		script = reconcileWLeaseScript
	}
	spec := make([]byte, 0, 24*len(bs))
	for _, b := range bs {
		d := r.WindowDelta(b.code, b.win)
		if charge && (b.code == llmrate.KeyRequests || b.code == llmrate.WorkspaceRequests) {
			d = 1 // a fallback admission's charge: its request (charges.go)
		}
		if d == 0 {
			continue // a requests meter (never reconciled), or nothing to charge: the bucket is left as it is
		}
		keys = append(keys, b.name)
		spec = appendFloats(spec, float64(b.win.Figure(b.code)), float64(b.win.Per.Microseconds()), float64(d))
	}
	if r.ID != "" {
		keys = append(keys, idKey(w, reconcileKind(charge), r.ID))
	}
	args := append(reconcileArgs(s.nowArg(), r, charge), r.ID, soloArg(release), string(spec))
	if s.leases != nil {
		own, ret, done := s.leasesBack(k, w, r)
		defer done()
		args = append(args, own[0], ret[0], ret[1], ret[2], ret[3], own[1])
	}
	_, err := s.run(ctx, script, keys, args, r.ID != "")
	return err
}

// leasesBack is what reconcileLeased does before a reconcile that debits
// Redis, for a windowed reconcile (which always goes to Redis): this
// process's leases on the entries are taken out, to go back in the same
// call (own: the workspace's and the key's records, "" for none; ret:
// their unused parts, key's then workspace's), and the group's epoch is
// bumped as the call starts and ends, so that this process admits nothing
// more on them (a renewal in flight meanwhile is not used) and its next
// admission sees the debt in Redis. done ends that; a reconcile that
// debits nothing returns nothing and bumps nothing.
func (s *Store) leasesBack(k, w string, r llmrate.ReconcileRequest) (own [2]string, ret [4]int64, done func()) {
	done = func() {}
	dk, dw := r.BoundedActual(llmrate.KeyTokens)-r.Estimate, r.BoundedActual(llmrate.WorkspaceTokens)-r.Estimate
	if r.Refund || dk <= 0 && dw <= 0 {
		return own, ret, done
	}
	lz := s.leases
	lz.mu.Lock()
	g := lz.held[w]
	lz.mu.Unlock()
	if g == nil {
		return own, ret, done
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dead {
		return own, ret, done
	}
	var wr, kr [2]int64
	own[0], wr = g.ws.out()
	ret[2], ret[3] = wr[0], wr[1]
	if kl := g.keys[k]; !r.Solo && kl != nil {
		own[1], kr = kl.out()
		ret[0], ret[1] = kr[0], kr[1]
	}
	g.epoch++
	g.reconciling++
	return own, ret, func() {
		g.mu.Lock()
		g.epoch++
		g.reconciling--
		g.mu.Unlock()
	}
}

// appendFloats appends vs as little-endian doubles (integers below 2^53:
// exact).
func appendFloats(b []byte, vs ...float64) []byte {
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

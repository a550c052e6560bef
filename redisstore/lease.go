package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed leasebucket.lua
	leaseBucketLua string
	//go:embed lease.lua
	leaseLua string
	//go:embed leasereconcile.lua
	leaseReconcileLua string

	leaseScript          = redis.NewScript(arithLua + entryLua + leaseBucketLua + leaseLua)
	leaseReconcileScript = redis.NewScript(arithLua + entryLua + leaseBucketLua + leaseReconcileLua)
)

// Lease timing. A lease is used for at most leaseUse after its request
// was sent (local clock), so that every process holding one goes back to
// Redis, and sees a debt another process's reconcile left there, within
// leaseUse and a round trip. A lease unused for leaseIdle is returned by
// the store's returner, which looks every leaseTick. Its record lives
// leaseLife in Redis, well past leaseUse, so that a lease in use is renewed
// (and its unused part credited back) while its record is still there:
// only a process that stalls that long, or dies, lets a record expire; its
// unused part is then lost to the bucket, which refills as usual.
const (
	leaseIdle = 750 * time.Millisecond
	leaseTick = 250 * time.Millisecond
	leaseLife = 3 * time.Second
	leaseUse  = 100 * time.Millisecond
)

// WithLeases lets each process take, in one round trip, a lease of up to
// share × capacity of a busy key's and its workspace's buckets (all four,
// or two for a key that is its own workspace; all or none) and admit
// against it locally, exactly, going to Redis again only when the lease
// cannot cover a request. 0 < share ≤ 0.25. Default: off. A key is busy
// when it was admitted through Redis less than a second before.
//
// Leases are debited in Redis up front, and a bucket in Redis refills only
// up to its capacity less the capacity out on lease, so the processes
// together never admit more than one exact limit would. A process holds at
// most one lease per bucket: one per key, and one per workspace shared by
// all its keys there. The price is capacity stranded in other processes'
// unused leases: at most processes × share × capacity per bucket, however
// many keys each process serves, returned once a lease has been unused for
// about a second (at most leaseIdle + leaseTick) or at Close, which waits
// for renewals in flight. A lease's record expires 3 s after it was taken;
// a process that dies (or stalls past that) loses its unused part, which
// the bucket then refills as usual. Once leases are back, a bucket may hold
// up to processes × share × capacity less than an exact one until it
// refills: a lease's used part kept it from refilling past capacity less
// the lease.
//
// A request refused meanwhile gets the Retry-After computed from the Redis
// level, as without leases: it counts neither the capacity other processes
// hold (which may come back sooner) nor leases still out when it expires;
// while the held capacity is the only room left, a request is refused that
// one exact limit would have admitted.
//
// A reconcile that a key's and its workspace's leases can absorb is applied
// to them; any other goes to Redis as without leases, returning this
// process's leases of the key and workspace in the same call, so this
// process admits nothing more on them (a renewal in flight meanwhile is
// not used). It does not reach other processes' leases: when it leaves a
// bucket in debt, they may still admit their unused parts (so up to
// (processes − 1) × share × capacity more than one exact limit would)
// until they next go to Redis: a process uses a lease for at most 100 ms
// after asking for it, so within 100 ms and a round trip. Every process sharing the
// buckets must use leases, or none: a process without them does not see
// the capacity out on lease. The store then runs a goroutine that returns
// idle leases; Close stops it and returns every lease.
//
// A reconcile a lease absorbed never reaches Redis, so the store keeps its
// identity 30 s, and that of each reconcile it sent to Redis, to apply a
// repeat at most once: at most 524,288 (the last 30 s of about 17,000
// reconciles a second; about 52 MiB), each reconcile expiring only
// identities whose 30 s are over, a few at a time. Past that bound nothing
// is forgotten early: a reconcile that finds the record full goes to
// Redis, which keeps its identity, and so does every reconcile until 30 s
// after the last one that found it full; the leases meanwhile absorb no
// reconcile (each costs a round trip, as without leases).
//
// Windows bypass leases: a request held to any window (a plan's quota
// lent to it included) is decided in Redis, so with a plan quota on every
// request WithLeases does nothing.
func WithLeases(share float64) Option {
	return optionFunc(func(c *config) { c.leases, c.leasesSet = share, true })
}

// leaser holds this process's leases: at most one per entry in Redis, so
// one per key and one per workspace, the workspace's shared by all its keys
// in this process. A lease's record in Redis (field id of the entry's lease
// hash) is exactly what this process holds of that entry, taken and
// returned whole.
type leaser struct {
	share float64
	id    string // this process's lease id in Redis

	mu     sync.Mutex
	held   map[string]*group // by workspace entry name
	start  sync.Once
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup

	// fmu guards closing and the Add of flying; it is never held with
	// another lock.
	fmu     sync.Mutex
	closing bool           // set by Close: no renewal starts after it
	flying  sync.WaitGroup // renewals in flight, which Close waits for

	local atomic.Int64  // admissions decided on a lease
	gen   atomic.Uint64 // the last lease generation granted
}

// field returns the name of a new lease's record: this process's lease id
// and a fresh generation, so that no two grants share a record.
func (lz *leaser) field() string {
	return lz.id + ":" + strconv.FormatUint(lz.gen.Add(1), 36)
}

// part is one entry's lease (its requests and tokens buckets).
type part struct {
	lim   llmrate.Limits // the entry's figures it was taken under
	left  [2]int64       // unused
	gross [2]int64       // as taken; zero when no record is out in Redis
	level [2]int64       // Redis levels after the last call, without the lease
	until time.Time      // not used from then on (local clock)
	used  time.Time      // last admission against it, or its grant
	field string         // its record's name in the lease hash; "" when none is out
}

// covers reports whether p can admit a request of n tokens under lim now.
func (p *part) covers(lim llmrate.Limits, now time.Time, n int64) bool {
	return p.lim.Equal(lim) && now.Before(p.until) && p.left[0] >= 1 && p.left[1] >= n
}

func (p *part) take(now time.Time, n int64) {
	p.left[0]--
	p.left[1] -= n
	p.used = now
}

// set installs a lease granted under lim (zero: none) as record field.
// An unusable lease (granted before a debt this process reconciled) is
// kept only to be returned whole.
func (p *part) set(lim llmrate.Limits, granted, level [2]int64, now time.Time, field string, usable bool) {
	p.lim, p.left, p.gross, p.used, p.until = lim, granted, granted, now, now.Add(leaseUse)
	p.level = [2]int64{level[0] - granted[0], level[1] - granted[1]}
	p.field = ""
	if granted != ([2]int64{}) {
		p.field = field
	}
	if !usable {
		p.until = now
	}
}

// out returns p's record name ("" when none is out) and unused part, and
// forgets the lease (its record is then returned by the caller).
func (p *part) out() (string, [2]int64) {
	left, field := p.left, p.field
	p.left, p.gross, p.field = [2]int64{}, [2]int64{}, ""
	return field, left
}

// group is one workspace's leases in this process: the workspace lease and
// its keys'.
type group struct {
	mu    sync.Mutex
	ws    part
	keys  map[string]*keyLease // by key entry name
	ready chan struct{}        // non-nil while a renewal is in flight; closed after
	dead  bool                 // forgotten by the returner: look the group up again
	// A reconcile that debits Redis bumps epoch as it starts and ends,
	// and counts itself in reconciling meanwhile: a renewal that saw
	// either change while in flight may have been granted before the
	// debt, and its lease is not used.
	epoch       uint64
	reconciling int
}

// keyLease is one key's lease and recent use.
type keyLease struct {
	part
	wl    llmrate.Limits // the workspace figures of its last call
	redis time.Time      // last admission through Redis
	ready chan struct{}  // non-nil while a call that takes no lease is in flight; closed after
}

// localNow is the lease clock: WithClock's when set (the scripts use it
// too), else the monotonic clock, which never runs ahead of Redis's for a
// lease sent before Redis granted it.
func (s *Store) localNow() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now()
}

// want returns the lease to ask for under these figures.
func (lz *leaser) want(kl, wl llmrate.Limits) [4]int64 {
	f := func(perMin int64) int64 { return int64(lz.share * float64(2*perMin)) }
	return [4]int64{f(kl.RequestsPerMinute), f(kl.TokensPerMinute), f(wl.RequestsPerMinute), f(wl.TokensPerMinute)}
}

// groupFor returns w's group, false once the store is closed.
func (s *Store) groupFor(w string) (*group, bool) {
	lz := s.leases
	lz.mu.Lock()
	defer lz.mu.Unlock()
	if lz.closed {
		return nil, false
	}
	g := lz.held[w]
	if g == nil {
		g = &group{keys: map[string]*keyLease{}}
		lz.held[w] = g
	}
	lz.start.Do(func() {
		lz.wg.Add(1)
		go s.returner()
	})
	return g, true
}

// enter registers a renewal, false once Close has begun.
func (lz *leaser) enter() bool {
	lz.fmu.Lock()
	defer lz.fmu.Unlock()
	if lz.closing {
		return false
	}
	lz.flying.Add(1)
	return true
}

// admitLeased admits r against this process's leases of its key and
// workspace when they cover it, else through Redis, renewing both leases
// when the key is busy.
func (s *Store) admitLeased(ctx context.Context, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	k, w := s.ModelKeys(r.Key, r.Workspace, r.Model)
	want := s.leases.want(r.KeyLimits, r.WorkspaceLimits)
	if r.Tokens > want[llmrate.KeyTokens] || r.Tokens > want[llmrate.WorkspaceTokens] {
		return s.admitUnleased(ctx, k, w, r) // no lease could cover it
	}
	for {
		g, ok := s.groupFor(w)
		if !ok { // closed: no new leases
			return s.admitUnleased(ctx, k, w, r)
		}
		now := s.localNow()
		g.mu.Lock()
		if g.dead {
			g.mu.Unlock()
			continue
		}
		kl := g.keys[k]
		if kl == nil {
			kl = &keyLease{}
			g.keys[k] = kl
		}
		if d, ok := takeLeased(g, kl, r, now); ok {
			g.mu.Unlock()
			s.leases.local.Add(1)
			return d, nil
		}
		ready := g.ready
		if ready == nil {
			ready = kl.ready
		}
		if ready != nil {
			// A renewal of this workspace's leases, or a Redis call for
			// this key, is in flight: wait for it, then look again.
			g.mu.Unlock()
			if again, d, err := s.awaitRenewal(ctx, ready, k, w, r); !again {
				return d, err
			}
			continue
		}
		if !s.up(ctx) { // the lease cannot cover it and Redis is out
			g.mu.Unlock()
			return s.admitLocal(ctx, r, errDown)
		}
		return s.renew(ctx, g, kl, k, w, r, now, want)
	}
}

// takeLeased admits r from the leases of its workspace (g, whose lock the
// caller holds) and key (kl) when both cover it (a Solo request's key
// buckets are the workspace's), with the levels the leases leave.
func takeLeased(g *group, kl *keyLease, r llmrate.AdmitRequest, now time.Time) (llmrate.Decision, bool) {
	if !g.ws.covers(r.WorkspaceLimits, now, r.Tokens) || !r.Solo && !kl.covers(r.KeyLimits, now, r.Tokens) {
		return llmrate.Decision{}, false
	}
	g.ws.take(now, r.Tokens)
	src := &g.ws // solo: the key's buckets are the workspace's
	if !r.Solo {
		kl.take(now, r.Tokens)
		src = &kl.part
	}
	d := llmrate.Decision{Allowed: true}
	for b := range 2 {
		d.Remaining[b] = src.level[b] + src.left[b]
		d.Remaining[2+b] = g.ws.level[b] + g.ws.left[b]
	}
	return d, true
}

// awaitRenewal waits for ready, the end of a renewal of r's workspace
// leases or of a Redis call for its key in flight, so that this process
// does not ask Redis while its own lease still holds room, nor takes a
// key's first lease twice; but it waits at most a hedge delay (see
// hedge.go). again reports that the call ended: the caller looks again.
// Otherwise r is decided here, with d and err.
func (s *Store) awaitRenewal(ctx context.Context, ready <-chan struct{}, k, w string, r llmrate.AdmitRequest) (again bool, d llmrate.Decision, err error) {
	t := time.NewTimer(s.hedge.delayFor(ctx, time.Now(), s.timeout))
	select {
	case <-ready:
		t.Stop()
		return true, d, nil
	case <-t.C:
		select {
		case <-ready: // done as the timer fired: look again
			return true, d, nil
		default:
		}
		// The call waited for is slow (its reply held or lost): this
		// admission is decided on Redis by a call of its own, which
		// takes no lease, rather than waiting out its deadline and
		// going to the fallback.
		d, err = s.admitUnleased(ctx, k, w, r)
		return false, d, err
	case <-ctx.Done():
		t.Stop()
		// The deadline passed while Redis was slow: the fallback
		// decides, as for a call of its own that timed out. A
		// caller that gave up gets its error.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			d, err = s.admitLocal(ctx, r, fmt.Errorf("redisstore: waiting for a lease renewal: %w", ctx.Err()))
			return false, d, err
		}
		return false, d, ctx.Err()
	}
}

// admitUnleased admits r through Redis without a lease, unless the breaker
// is open: then the fallback decides.
func (s *Store) admitUnleased(ctx context.Context, k, w string, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	if !s.up(ctx) {
		return s.admitLocal(ctx, r, errDown)
	}
	return s.admitPlain(ctx, k, w, r)
}

// renew admits r through Redis. When the key is busy it returns, in the
// same call, this process's whole workspace lease and the key's lease and
// takes new ones (all or none). g.mu is held, and released.
func (s *Store) renew(ctx context.Context, g *group, kl *keyLease, k, w string, r llmrate.AdmitRequest, now time.Time, want [4]int64) (llmrate.Decision, error) {
	since := now.Sub(kl.redis)
	busy := !kl.redis.IsZero() && since >= 0 && since < time.Second
	kl.redis = now
	if !busy { // no lease taken, the ones held stay; this key's other callers wait
		ready := make(chan struct{})
		kl.ready = ready
		g.mu.Unlock()
		d, err := s.admitPlain(ctx, k, w, r)
		g.mu.Lock()
		kl.ready = nil
		close(ready)
		g.mu.Unlock()
		return d, err
	}
	if !s.leases.enter() { // closing
		g.mu.Unlock()
		return s.admitPlain(ctx, k, w, r)
	}
	defer s.leases.flying.Done()
	lc := leaseCall{k: k, w: w, id: r.ID, tokens: r.Tokens, kl: r.KeyLimits, wl: r.WorkspaceLimits, solo: r.Solo, want: want}
	var wr [2]int64
	lc.wown, wr = g.ws.out()
	lc.ret[2], lc.ret[3] = wr[0], wr[1]
	lc.wnew = s.leases.field()
	if !r.Solo {
		var kr [2]int64
		lc.kown, kr = kl.out()
		lc.ret[0], lc.ret[1] = kr[0], kr[1]
		lc.knew = s.leases.field()
	}
	// Every caller of this workspace waits for this call (see admitLeased).
	ready := make(chan struct{})
	g.ready = ready
	epoch := g.epoch
	g.mu.Unlock()

	d, granted, err := s.runLease(ctx, lc)
	g.mu.Lock()
	g.ready = nil
	close(ready)
	if err == nil {
		usable := g.epoch == epoch && g.reconciling == 0
		rem := d.Remaining
		g.ws.set(r.WorkspaceLimits, [2]int64{granted[2], granted[3]}, [2]int64{rem[2], rem[3]}, now, lc.wnew, usable)
		if !r.Solo {
			kl.set(r.KeyLimits, [2]int64{granted[0], granted[1]}, [2]int64{rem[0], rem[1]}, now, lc.knew, usable)
			kl.wl = r.WorkspaceLimits
		}
	}
	g.mu.Unlock()
	if err != nil {
		return s.admitLocal(ctx, r, err)
	}
	// lease.lua's levels are before the lease it granted, which this
	// process spends without Redis: the fallback follows what Redis holds
	// beside it.
	fd := d
	for i, n := range granted {
		fd.Remaining[i] -= n
	}
	s.follow(&r, &fd)
	return d, nil
}

// admitPlain is one lease.lua call that neither takes nor returns a lease.
func (s *Store) admitPlain(ctx context.Context, k, w string, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	d, _, err := s.runLease(ctx, leaseCall{k: k, w: w, id: r.ID, tokens: r.Tokens, kl: r.KeyLimits, wl: r.WorkspaceLimits, solo: r.Solo})
	if err != nil {
		return s.admitLocal(ctx, r, err)
	}
	s.follow(&r, &d)
	return d, nil
}

// leaseCall is one lease.lua call.
type leaseCall struct {
	k, w   string
	id     string // the admission's identity; "" for none (and for a return only)
	tokens int64  // -1: a return only
	kl, wl llmrate.Limits
	solo   bool
	want   [4]int64 // the lease wanted
	ret    [4]int64 // the unused parts of the leases returned
	// The records of the leases returned ("" = none), and of those
	// granted ("" = none wanted).
	wown, kown, wnew, knew string
}

// runLease runs lease.lua once.
func (s *Store) runLease(ctx context.Context, c leaseCall) (llmrate.Decision, [4]int64, error) {
	keys := []string{c.k, c.w, c.k + ":l", c.w + ":l"}
	if c.id != "" {
		keys = append(keys, idKey(c.w, 'a', c.id))
	}
	v, err := s.run(ctx, leaseScript, keys, []any{s.nowArg(), c.wown, c.tokens,
		c.kl.RequestsPerMinute, c.kl.TokensPerMinute, c.wl.RequestsPerMinute, c.wl.TokensPerMinute, soloArg(c.solo),
		c.want[0], c.want[1], c.want[2], c.want[3], c.ret[0], c.ret[1], c.ret[2], c.ret[3], leaseLife.Microseconds(), c.kown,
		c.wnew, c.knew, admitIDLife.Milliseconds()}, c.id != "" || c.tokens < 0)
	if err != nil {
		return llmrate.Decision{}, [4]int64{}, err
	}
	res, err := int64s(v, 12)
	if err != nil {
		return llmrate.Decision{}, [4]int64{}, s.failed(err)
	}
	return decisionFrom(res[:8]), [4]int64{res[8], res[9], res[10], res[11]}, nil
}

// reconcileLeased is Reconcile when leases are on. A reconcile of a key
// this process holds leases for is applied to them when it can be: a debit
// the key's and the workspace's unused parts cover is taken from them, a
// credit up to what was used of them goes back into them. Otherwise both
// are returned in the same call, before the reconcile is applied in Redis,
// so that this process admits nothing more on them: the next admission goes
// to Redis and sees the buckets' debt. A renewal in flight meanwhile may
// have been granted before the debt: its lease is not used (see group).
// A refund, and a repeat of a reconcile sent to Redis before (Redis alone
// knows whether it was applied), always go to Redis; a repeat of one a
// lease absorbed is not applied again.
func (s *Store) reconcileLeased(ctx context.Context, r llmrate.ReconcileRequest, charge bool) error {
	k, w := s.ModelKeys(r.Key, r.Workspace, r.Model)
	var wown, kown string
	var ret [4]int64
	lz := s.leases
	lz.mu.Lock()
	g := lz.held[w]
	lz.mu.Unlock()
	seen, absorbed, open := s.seen.lookup(r.ID, s.localNow())
	if charge {
		seen, absorbed = true, false // a charge goes to Redis, under its own identity
	}
	if absorbed {
		return nil // applied once already, to this process's leases
	}
	dk, dw := r.BoundedActual(llmrate.KeyTokens)-r.Estimate, r.BoundedActual(llmrate.WorkspaceTokens)-r.Estimate
	debit := !r.Refund && (dk > 0 || dw > 0)
	if g != nil {
		g.mu.Lock()
		if !g.dead {
			now := s.localNow()
			kl := g.keys[k]
			fits := func(p *part, lim llmrate.Limits, d int64) bool { // d applies to p's tokens
				if !p.lim.Equal(lim) || !now.Before(p.until) || p.gross == ([2]int64{}) {
					return false
				}
				return d >= 0 && p.left[1] >= d || d <= 0 && -d <= p.gross[1]-p.left[1]
			}
			local := g.ready == nil && !r.Refund && !seen && open
			absorb := local && r.Solo && fits(&g.ws, r.WorkspaceLimits, dw) ||
				local && !r.Solo && kl != nil && (dk >= 0) == (dw >= 0) && fits(&g.ws, r.WorkspaceLimits, dw) && fits(&kl.part, r.KeyLimits, dk)
			if absorb {
				switch s.seen.absorb(r.ID, now) {
				case absorbOK:
					g.ws.left[1] -= dw
					if !r.Solo {
						kl.left[1] -= dk
					}
					g.mu.Unlock()
					return nil
				case absorbDone: // by a send of it meanwhile
					g.mu.Unlock()
					return nil
				}
				// The record is full, or a send of it meanwhile went to
				// Redis: so does this one.
			}
			// To Redis: this process's leases go back first (a renewal in
			// flight has taken them out already).
			var wr, kr [2]int64
			wown, wr = g.ws.out()
			ret[2], ret[3] = wr[0], wr[1]
			if !r.Solo && kl != nil {
				kown, kr = kl.out()
				ret[0], ret[1] = kr[0], kr[1]
			}
			if debit {
				g.epoch++
				g.reconciling++
				defer func() {
					g.mu.Lock()
					g.epoch++
					g.reconciling--
					g.mu.Unlock()
				}()
			}
		}
		g.mu.Unlock()
	}
	keys := []string{k, w, k + ":l", w + ":l"}
	if r.ID != "" {
		keys = append(keys, idKey(w, reconcileKind(charge), r.ID))
	}
	args := append(reconcileArgs(s.nowArg(), r, charge), wown, ret[0], ret[1], ret[2], ret[3], kown)
	if !charge {
		s.seen.sent(r.ID, s.localNow()) // a repeat goes to Redis, applied or not
	}
	_, err := s.run(ctx, leaseReconcileScript, keys, args, r.ID != "")
	return err
}

// returner returns leases unused for leaseIdle, until Close.
func (s *Store) returner() {
	lz := s.leases
	defer lz.wg.Done()
	t := time.NewTicker(leaseTick)
	defer t.Stop()
	for {
		select {
		case <-lz.stop:
			return
		case <-t.C:
			_ = s.returnLeases(context.Background(), s.localNow().Add(-leaseIdle))
		}
	}
}

// returnLeases returns every lease last used before idleSince (every lease
// when idleSince is zero), each on its own (a workspace lease stays while
// any of its keys uses it), and forgets keys not admitted through Redis for
// a second and holding no lease, and workspaces left without keys or lease.
func (s *Store) returnLeases(ctx context.Context, idleSince time.Time) error {
	lz := s.leases
	type ret struct {
		k, w   string
		kl, wl llmrate.Limits
		field  string
		left   [2]int64
		ws     bool // the workspace lease; else a key's
	}
	var rets []ret
	all := idleSince.IsZero()
	lz.mu.Lock()
	for w, g := range lz.held {
		g.mu.Lock()
		if g.ready == nil {
			if g.ws.gross != ([2]int64{}) && (all || g.ws.used.Before(idleSince)) {
				f, left := g.ws.out()
				rets = append(rets, ret{k: w, w: w, kl: g.ws.lim, wl: g.ws.lim, field: f, left: left, ws: true})
			}
			for k, kl := range g.keys {
				if kl.gross != ([2]int64{}) && (all || kl.used.Before(idleSince)) {
					f, left := kl.out()
					rets = append(rets, ret{k: k, w: w, kl: kl.lim, wl: kl.wl, field: f, left: left})
				}
				if !all && kl.gross == ([2]int64{}) && kl.redis.Before(idleSince.Add(leaseIdle-time.Second)) {
					delete(g.keys, k)
				}
			}
			if !all && len(g.keys) == 0 && g.ws.gross == ([2]int64{}) {
				g.dead = true
				delete(lz.held, w)
			}
		}
		g.mu.Unlock()
	}
	lz.mu.Unlock()
	var errs []error
	for _, r := range rets {
		var err error
		if r.ws { // as solo: only the workspace entry is touched
			_, _, err = s.runLease(ctx, leaseCall{k: r.w, w: r.w, tokens: -1, kl: r.wl, wl: r.wl, solo: true, ret: [4]int64{0, 0, r.left[0], r.left[1]}, wown: r.field})
		} else {
			_, _, err = s.runLease(ctx, leaseCall{k: r.k, w: r.w, tokens: -1, kl: r.kl, wl: r.wl, ret: [4]int64{r.left[0], r.left[1], 0, 0}, kown: r.field})
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("redisstore: %d leases not returned (they expire within %v): %w", len(errs), leaseLife, errors.Join(errs...))
	}
	return nil
}

// Close stops the refresher of this process's concurrency slots (see
// WithSlotTTL: slots still held then expire a slot life after their last
// refresh, unless their reconciles release them first) and the lease
// returner, sends the local fallback's pending charges to Redis until ctx
// is done (Charges counts those left as lost), waits for the lease renewals
// in flight and returns every lease to Redis. It is safe to call more than
// once. The store still answers after Close, without leases, without
// refreshing slots and without charging the fallback's admissions to
// Redis. It does not close the Redis client, which the caller owns.
func (s *Store) Close(ctx context.Context) error {
	s.closeGauges()
	s.closeCharges(ctx) // charges.go
	lz := s.leases
	if lz == nil {
		return nil
	}
	lz.mu.Lock()
	if lz.closed {
		lz.mu.Unlock()
		return nil
	}
	lz.closed = true
	close(lz.stop)
	lz.mu.Unlock()
	lz.wg.Wait()
	lz.fmu.Lock()
	lz.closing = true
	lz.fmu.Unlock()
	lz.flying.Wait() // bounded by the store's timeout
	return s.returnLeases(ctx, time.Time{})
}

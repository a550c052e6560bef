package redisstore

import (
	"context"
	_ "embed"
	"sync"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed admitx.lua
	admitXLua string
	//go:embed rid.lua
	ridLua string
	//go:embed release.lua
	releaseLua string
	//go:embed refresh.lua
	refreshLua string
	//go:embed xplain.lua
	xPlainLua string
	//go:embed xlease.lua
	xLeaseLua string
	//go:embed releaseonly.lua
	releaseOnlyLua string

	admitXScript          = redis.NewScript(arithLua + admitOneLua + xPlainLua + admitXLua)
	admitXLeaseScript     = redis.NewScript(arithLua + entryLua + admitOneLua + leaseBucketLua + xLeaseLua + admitXLua)
	releaseOnlyScript     = redis.NewScript(releaseOnlyLua)
	reconcileGaugedScript = redis.NewScript(arithLua + entryLua + releaseLua + reconcileLua)
	refreshScript         = redis.NewScript(refreshLua)
)

// DefaultSlotTTL is how long a concurrency slot outlives the last refresh
// of the process holding it (WithSlotTTL).
const DefaultSlotTTL = 30 * time.Second

// WithSlotTTL sets how soon a concurrency slot (llmrate.Limits
// ConcurrentRequests) of a process that died, or lost Redis, is freed:
// each slot in Redis expires d after it was taken or last refreshed, and a
// live process refreshes the slots it holds every d/3 (one call per
// workspace every d/3, from a goroutine Close stops), so a slot held by a
// live process never expires however long its response streams. Default:
// DefaultSlotTTL (30 s). d must be positive.
func WithSlotTTL(d time.Duration) Option {
	return optionFunc(func(c *config) { c.slotTTL, c.slotTTLSet = d, true })
}

// receiptGauged is the Decision.Receipt of an admission Redis decided
// under a gauge: its reconcile releases its slots.
const receiptGauged = "g"

// gaugeNames returns the names of the key's and the workspace's gauges,
// next to their entries k and w (same hash slot). A Solo request's one
// gauge is its workspace's.
func gaugeNames(k, w string) (kg, wg string) {
	return k + ":c", w + ":c"
}

// gauged reports whether r is held to a gauge.
func gauged(kl, wl llmrate.Limits) bool {
	return kl.ConcurrentRequests > 0 || wl.ConcurrentRequests > 0
}

// holder keeps the slots this process holds in Redis, by admission ID, and
// refreshes them every slot life / 3 while any is held.
type holder struct {
	ttl time.Duration

	mu      sync.Mutex
	held    map[string]slots // by admission ID
	running bool
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup
	ctx     context.Context // cancelled by Close
	cancel  context.CancelFunc
}

// slots is what one admission holds: its gauges' names (the workspace
// entry w groups a refresh call: one hash slot).
type slots struct {
	w, kg, wg string
	key, ws   bool
	// The plan's gauges lent to a model entry's request (quota.go).
	pkg, pwg  string
	pkey, pws bool
}

func newHolder(ttl time.Duration) *holder {
	ctx, cancel := context.WithCancel(context.Background())
	return &holder{ttl: ttl, held: map[string]slots{}, stop: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// hold records id's slots and starts the refresher if it is not running.
func (s *Store) hold(id string, sl slots) {
	h := s.gauges
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[id] = sl
	if !h.running && !h.closed {
		h.running = true
		h.wg.Add(1)
		go s.refreshLoop()
	}
}

// unhold forgets id's slots: its reconcile releases them in Redis (or,
// when that never lands, they expire a slot life after their last refresh).
func (h *holder) unhold(id string) {
	h.mu.Lock()
	delete(h.held, id)
	h.mu.Unlock()
}

// Held returns how many admissions hold slots this process refreshes.
func (s *Store) Held() int {
	s.gauges.mu.Lock()
	defer s.gauges.mu.Unlock()
	return len(s.gauges.held)
}

func (s *Store) refreshLoop() {
	h := s.gauges
	defer h.wg.Done()
	t := time.NewTicker(h.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			s.refresh()
		}
	}
}

// refresh renews every slot held, one call per hash slot (workspace).
// A failed call is counted (Errors) as any Redis call; the slots it
// carried expire if the next refreshes fail too.
func (s *Store) refresh() {
	h := s.gauges
	h.mu.Lock()
	groups := map[string][]string{} // w -> keys then ids interleaved
	for id, sl := range h.held {
		g := groups[sl.w]
		if sl.key {
			g = append(g, sl.kg, id)
		}
		if sl.ws {
			g = append(g, sl.wg, id)
		}
		if sl.pkey {
			g = append(g, sl.pkg, id)
		}
		if sl.pws {
			g = append(g, sl.pwg, id)
		}
		groups[sl.w] = g
	}
	h.mu.Unlock()
	if len(groups) == 0 || !s.up(h.ctx) {
		// Nothing held, or the breaker is open (Redis is probed as it
		// decides: a refresh may be the probe).
		return
	}
	ttl := h.ttl.Milliseconds()
	for _, g := range groups {
		keys := make([]string, 0, len(g)/2)
		args := make([]any, 0, 1+len(g)/2)
		args = append(args, ttl)
		for i := 0; i < len(g); i += 2 {
			keys = append(keys, g[i])
			args = append(args, g[i+1])
		}
		// Close cancels h.ctx: it then waits for no call in flight.
		_, _ = s.run(h.ctx, refreshScript, keys, args, true)
	}
}

// closeGauges stops the refresher; slots still held then expire a slot
// life after their last refresh unless their reconciles release them.
func (s *Store) closeGauges() {
	h := s.gauges
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.stop)
		h.cancel()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// admitX decides an admission with a bounded wait or a gauge (admitx.lua),
// in one round trip, never batched nor decided on a lease: with WithLeases
// it goes to Redis, which counts the capacity out on lease as lease.lua
// does.
func (s *Store) admitX(ctx context.Context, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	k, w := s.names(r.Key, r.Workspace, r.Model, r.Solo)
	kg, wg := gaugeNames(k, w)
	kc, wc := max(0, r.KeyLimits.ConcurrentRequests), max(0, r.WorkspaceLimits.ConcurrentRequests)
	if r.Solo {
		kc, wc = wc, 0
	}
	keys := []string{k, w, kg, wg}
	script := admitXScript
	if s.leases != nil {
		keys = append(keys, k+":l", w+":l")
		script = admitXLeaseScript
	}
	if r.ID != "" {
		keys = append(keys, idKey(w, 'a', r.ID))
	}
	args := []any{s.nowArg(), admitArg(r), admitIDLife.Milliseconds(), max(0, r.MaxWait.Microseconds()),
		kc, wc, s.gauges.ttl.Milliseconds(), r.ID}
	v, err := s.run(ctx, script, keys, args, r.ID != "")
	if err != nil {
		return s.admitLocal(ctx, r, err)
	}
	res, err := int64s(v, 9)
	if err != nil {
		return s.admitLocal(ctx, r, s.failed(err))
	}
	d := llmrate.Decision{
		Allowed:    res[0] == 1,
		Refused:    llmrate.Bucket(res[1]),
		RetryAfter: time.Duration(res[2]) * time.Microsecond,
		NeverFits:  res[3] == 1,
		Remaining:  [4]int64{res[4], res[5], res[6], res[7]},
		Wait:       time.Duration(res[8]) * time.Microsecond,
	}
	s.follow(&r, &d)
	if d.Allowed && kc+wc > 0 {
		d.Receipt = receiptGauged
		s.hold(r.ID, slots{w: w, kg: kg, wg: wg, key: kc > 0, ws: wc > 0})
	}
	return d, nil
}

// reconcileGauged is Reconcile for an admission that took slots: the same
// call releases them (release.lua), at most once. With leases, the
// release is a call of its own, before the reconcile goes its leased way.
func (s *Store) reconcileGauged(ctx context.Context, r llmrate.ReconcileRequest) error {
	k, w := s.names(r.Key, r.Workspace, r.Model, r.Solo)
	kg, wg := gaugeNames(k, w)
	if s.leases != nil {
		if _, err := s.run(ctx, releaseOnlyScript, []string{kg, wg}, []any{r.ID}, true); err != nil {
			return err
		}
		return s.reconcileLeased(ctx, r, false)
	}
	keys := []string{k, w, kg, wg, idKey(w, 'r', r.ID)}
	args := append(reconcileArgs(s.nowArg(), r, false), r.ID)
	_, err := s.run(ctx, reconcileGaugedScript, keys, args, true)
	return err
}

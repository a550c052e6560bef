package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
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

	leaseScript          = redis.NewScript(bucketLua + leaseBucketLua + leaseLua)
	leaseReconcileScript = redis.NewScript(bucketLua + leaseBucketLua + leaseReconcileLua)
)

// Lease timing. A lease unused for leaseIdle is returned by the store's
// returner, which looks every leaseTick, so within leaseIdle+leaseTick of
// its last use; a lease lives at most leaseLife in Redis and is used at most
// until leaseLife after its request was sent, so a process that dies
// strands its lease for at most leaseLife.
const (
	leaseIdle = 750 * time.Millisecond
	leaseTick = 250 * time.Millisecond
	leaseLife = 3 * time.Second
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
// together never admit more than one exact limit would. The price is
// capacity stranded in other processes' unused leases: at most
// processes × share × capacity per bucket, returned once a lease has been
// unused for about a second (at most leaseIdle + leaseTick), when it
// expires (3 s after it was taken, also if its process died) or at Close.
// A request refused meanwhile gets the Retry-After computed from the Redis
// level, as without leases: it counts neither the capacity other processes
// hold (which may come back sooner) nor leases still out when it expires;
// while the held capacity is the only room left, a request is refused that
// one exact limit would have admitted.
//
// Reconciles go to Redis as without leases. Every process sharing the
// buckets must use leases, or none: a process without them does not see
// the capacity out on lease. The store then runs a goroutine that returns
// idle leases; Close stops it and returns every lease.
func WithLeases(share float64) Option {
	return optionFunc(func(c *config) { c.leases, c.leasesSet = share, true })
}

// leaser holds this process's leases.
type leaser struct {
	share float64
	id    string // this process's lease id in Redis

	mu     sync.Mutex
	held   map[string]*lease // by key entry name + workspace entry name
	start  sync.Once
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

// lease is one (key, workspace)'s lease, and its recent use.
type lease struct {
	mu     sync.Mutex
	k, w   string // entry names
	kh, wh string // their lease hashes
	solo   bool
	kl, wl llmrate.Limits // the figures it was taken under
	left   [4]int64       // unused, by Bucket; zero when there is none
	gross  [4]int64       // as taken
	level  [4]int64       // Redis levels after the last call, without the lease
	until  time.Time      // not used from then on (local clock)
	used   time.Time      // last admission, through Redis or the lease
	redis  time.Time      // last admission through Redis
	ready  chan struct{}  // non-nil while a call renewing the lease is in flight; closed after
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

func (s *Store) leaseFor(k, w string, r llmrate.AdmitRequest) (*lease, bool) {
	lz := s.leases
	id := k + "\x00" + w
	lz.mu.Lock()
	defer lz.mu.Unlock()
	if lz.closed {
		return nil, false
	}
	l := lz.held[id]
	if l == nil {
		l = &lease{k: k, w: w, kh: k + ":l", wh: w + ":l", solo: r.Solo}
		lz.held[id] = l
	}
	lz.start.Do(func() {
		lz.wg.Add(1)
		go s.returner()
	})
	return l, true
}

// admitLeased admits r against its lease when the lease covers it, else
// through Redis, renewing the lease when the key is busy.
func (s *Store) admitLeased(ctx context.Context, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	k, w := s.ModelKeys(r.Key, r.Workspace, r.Model)
	l, ok := s.leaseFor(k, w, r)
	if !ok { // closed: no new leases
		return s.admitPlain(ctx, k, w, r)
	}
	want := s.leases.want(r.KeyLimits, r.WorkspaceLimits)
	if r.Tokens > want[llmrate.KeyTokens] || r.Tokens > want[llmrate.WorkspaceTokens] {
		return s.admitPlain(ctx, k, w, r) // no lease could cover it
	}
	for {
		now := s.localNow()
		l.mu.Lock()
		same := l.kl == r.KeyLimits && l.wl == r.WorkspaceLimits && l.solo == r.Solo
		if same && now.Before(l.until) && l.left[llmrate.KeyRequests] >= 1 && l.left[llmrate.KeyTokens] >= r.Tokens &&
			l.left[llmrate.WorkspaceRequests] >= 1 && l.left[llmrate.WorkspaceTokens] >= r.Tokens {
			l.left[llmrate.KeyRequests]--
			l.left[llmrate.KeyTokens] -= r.Tokens
			l.left[llmrate.WorkspaceRequests]--
			l.left[llmrate.WorkspaceTokens] -= r.Tokens
			l.used = now
			d := llmrate.Decision{Allowed: true}
			for b := range d.Remaining {
				d.Remaining[b] = l.level[b] + l.left[b]
			}
			l.mu.Unlock()
			return d, nil
		}
		if ready := l.ready; ready != nil {
			// Another caller is renewing the lease: wait for it, then look
			// again, so that this process never asks Redis while its own
			// lease still holds room.
			l.mu.Unlock()
			select {
			case <-ready:
				continue
			case <-ctx.Done():
				return llmrate.Decision{}, ctx.Err()
			}
		}
		return s.renew(ctx, l, k, w, r, now, want)
	}
}

// renew returns l's unused part, admits r and, when the key is busy, takes
// a new lease, in one call. l.mu is held, and released.
func (s *Store) renew(ctx context.Context, l *lease, k, w string, r llmrate.AdmitRequest, now time.Time, want [4]int64) (llmrate.Decision, error) {
	if since := now.Sub(l.redis); l.redis.IsZero() || since < 0 || since >= time.Second {
		want = [4]int64{} // not busy: no lease yet
	}
	ret := l.left
	l.left = [4]int64{}
	ready := make(chan struct{})
	l.ready = ready
	l.redis, l.used = now, now
	l.mu.Unlock()

	d, granted, err := s.runLease(ctx, s.leases.id, k, w, r.Tokens, r.KeyLimits, r.WorkspaceLimits, r.Solo, want, ret)
	l.mu.Lock()
	l.ready = nil
	close(ready)
	if err == nil {
		l.left, l.gross = granted, granted
		l.kl, l.wl, l.solo = r.KeyLimits, r.WorkspaceLimits, r.Solo
		l.until = now.Add(leaseLife)
		for b := range l.level {
			l.level[b] = d.Remaining[b] - granted[b]
		}
	}
	l.mu.Unlock()
	if err != nil {
		return s.admitLocal(ctx, r, err)
	}
	return d, nil
}

// admitPlain is one lease.lua call that neither takes nor returns a lease.
func (s *Store) admitPlain(ctx context.Context, k, w string, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	d, _, err := s.runLease(ctx, "", k, w, r.Tokens, r.KeyLimits, r.WorkspaceLimits, r.Solo, [4]int64{}, [4]int64{})
	if err != nil {
		return s.admitLocal(ctx, r, err)
	}
	return d, nil
}

// runLease runs lease.lua once.
func (s *Store) runLease(ctx context.Context, id, k, w string, tokens int64, kl, wl llmrate.Limits, solo bool, want, ret [4]int64) (llmrate.Decision, [4]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := leaseScript.Run(ctx, s.c, []string{k, w, k + ":l", w + ":l"}, s.nowArg(), id, tokens,
		kl.RequestsPerMinute, kl.TokensPerMinute, wl.RequestsPerMinute, wl.TokensPerMinute, soloArg(solo),
		want[0], want[1], want[2], want[3], ret[0], ret[1], ret[2], ret[3], leaseLife.Microseconds()).Int64Slice()
	if err == nil && len(res) != 12 {
		err = fmt.Errorf("lease script returned %d values", len(res))
	}
	if err != nil {
		return llmrate.Decision{}, [4]int64{}, s.failed(err)
	}
	s.succeeded()
	return decisionFrom(res[:8]), [4]int64{res[8], res[9], res[10], res[11]}, nil
}

// reconcileLeased is Reconcile when leases are on. A reconcile of a key
// this process holds a lease for is applied to the lease when it can be: a
// debit the lease's unused part covers is taken from it, a credit up to
// what was used of it goes back into it. Otherwise the lease is returned
// in the same call, before the reconcile is applied in Redis, so that this
// process's next admission sees the bucket's debt.
func (s *Store) reconcileLeased(ctx context.Context, r llmrate.ReconcileRequest) error {
	k, w := s.ModelKeys(r.Key, r.Workspace, r.Model)
	var id string
	var ret [4]int64
	lz := s.leases
	lz.mu.Lock()
	l := lz.held[k+"\x00"+w]
	lz.mu.Unlock()
	if l != nil {
		l.mu.Lock()
		if l.left != ([4]int64{}) && l.ready == nil && l.kl == r.KeyLimits && l.wl == r.WorkspaceLimits && l.solo == r.Solo && s.localNow().Before(l.until) {
			kt, wt := llmrate.KeyTokens, llmrate.WorkspaceTokens
			dk, dw := r.BoundedActual(kt)-r.Estimate, r.BoundedActual(wt)-r.Estimate
			local := dk >= 0 && dw >= 0 && l.left[kt] >= dk && l.left[wt] >= dw ||
				dk <= 0 && dw <= 0 && -dk <= l.gross[kt]-l.left[kt] && -dw <= l.gross[wt]-l.left[wt]
			if local {
				l.left[kt] -= dk
				l.left[wt] -= dw
				l.mu.Unlock()
				return nil
			}
			id, ret = lz.id, l.left
			l.left = [4]int64{}
		}
		l.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	args := append(reconcileArgs(s.nowArg(), r), id, ret[0], ret[1], ret[2], ret[3])
	return leaseReconcileScript.Run(ctx, s.c, []string{k, w, k + ":l", w + ":l"}, args...).Err()
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
// when idleSince is zero), and forgets keys not admitted through Redis for
// a second.
func (s *Store) returnLeases(ctx context.Context, idleSince time.Time) error {
	lz := s.leases
	type ret struct {
		l    *lease
		left [4]int64
	}
	var rets []ret
	lz.mu.Lock()
	for id, l := range lz.held {
		l.mu.Lock()
		if l.ready == nil && (idleSince.IsZero() || l.used.Before(idleSince)) {
			if l.left != ([4]int64{}) {
				rets = append(rets, ret{l, l.left})
				l.left = [4]int64{}
			}
			if !idleSince.IsZero() && l.redis.Before(idleSince.Add(leaseIdle-time.Second)) {
				delete(lz.held, id)
			}
		}
		l.mu.Unlock()
	}
	lz.mu.Unlock()
	var errs []error
	for _, r := range rets {
		l := r.l
		_, _, err := s.runLease(ctx, lz.id, l.k, l.w, -1, l.kl, l.wl, l.solo, [4]int64{}, r.left)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("redisstore: %d leases not returned (they expire within %v): %w", len(errs), leaseLife, errors.Join(errs...))
	}
	return nil
}

// Close stops the lease returner and returns every lease to Redis. It is
// safe to call more than once and without leases (then it does nothing).
// The store still answers after Close, without leases. It does not close
// the Redis client, which the caller owns.
func (s *Store) Close(ctx context.Context) error {
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
	return s.returnLeases(ctx, time.Time{})
}

package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/redis/go-redis/v9"
)

// Charges: an admission the local fallback allowed (WithFallbackLocal)
// while Redis did not answer spent buckets that other processes share, and
// Redis did not see it. Following Redis (MemoryStore.Follow) starts the
// fallback from the levels Redis last reported, but the refill since then
// is given out twice: by the fallback here and by Redis to the others. So
// each such admission is charged to Redis once it answers again: one
// request and its tokens, debited whatever the levels (a bucket may go
// into debt, as a reconcile's debit does), so the shared buckets hold,
// over any stretch longer than the outage, what one exact bucket would
// have held. The admission's own reconcile, when it comes before the
// charge is sent, is folded into it (the charge is then what the request
// consumed); after, it goes to Redis as any reconcile does, as well as to
// the fallback.
//
// A silent reply or a timeout does not mean Redis did not decide: a call
// may have run there and its answer been lost. Before charging, the
// store looks for the admission's identity record (written only by an
// admission Redis allowed, and kept admitIDLife): when it is there, Redis
// has debited the admission itself, and only the reconcile, if any, is
// sent. A charge sent later than admitIDLife after its admission cannot
// tell, and is charged: twice, at worst, never not at all.
//
// Charges are sent one at a time, by one goroutine that the first call
// Redis answers after a failure starts and that stops when none is left or
// one fails (that one goes to the back of the queue, so that one charge
// Redis keeps failing does not hold the others; but one whose debit was
// sent, and so may have landed, is tried first, up to chargeFirstTries
// times, since its reconcile waits for it); each carries an identity
// that Redis keeps chargeLife, so a resent one is applied once. What a
// charge carries is fixed when it is first sent: a reconcile that comes
// after that, while the charge is not known to have landed, fails (the
// limiter retries it for a few seconds) rather than change a charge Redis
// may have applied already. At most maxCharges admissions are tracked,
// the charged ones awaiting their reconcile forgotten first (oldest
// first): past that, a fallback admission is not charged, and is counted
// (Charges' lost), as are admissions without an ID and the charges still
// unsent when the store is closed.

// maxCharges bounds the admissions tracked for charging (pending, or
// charged and awaiting their reconcile).
var maxCharges = 1 << 16 // a var for the tests

// chargeLife is how long a charged admission waits for its reconcile
// (past it, or once forgotten for room, a reconcile goes to the fallback
// alone, and Redis keeps what was charged: no longer than the longest
// response the limiter meters, in practice; a reconcile whose usage equals
// the estimate never comes), and how long Redis keeps a charge's identity
// record.
const chargeLife = 10 * time.Minute

// chargeFirstTries is how many times in a row a failed charge whose debit
// may have landed is tried before the others: its reconcile fails until
// it has landed, and the limiter retries a reconcile for a few seconds
// only; past that it goes to the back like any other.
const chargeFirstTries = 3

// chargeMaxRefusals is how many times Redis may answer a charge with an
// error of its own (a script error, WRONGTYPE on the tenant's entry: not a
// lost connection nor the breaker) before the charge is given up and
// counted lost: such an error comes back every time, and each try costs a
// call.
const chargeMaxRefusals = 3

// errChargeUnsettled is a fallback admission's reconcile that came while
// its charge, sent at least once, is not known to have landed in Redis:
// the limiter retries it.
var errChargeUnsettled = errors.New("redisstore: the fallback admission's charge to Redis is not settled yet")

// existsScript reports whether KEYS[1] exists (a script, so that it is
// bounded, hedged and counted as every other call is).
var existsScript = redis.NewScript(`return redis.call("EXISTS", KEYS[1])`)

// chargeState is where one fallback admission's charge stands.
type chargeState uint8

const (
	chargePending chargeState = iota // waiting to be sent
	chargeFlying                     // being sent
	chargeSent                       // debited in Redis (by the charge, or by Redis's own decision)
)

// charge is one fallback admission to charge to Redis.
type charge struct {
	r       llmrate.AdmitRequest
	rec     *llmrate.ReconcileRequest // its reconcile, when it came before the charge was first sent
	tried   bool                      // its debit sent at least once: what it carries is fixed
	fails   int                       // failed sends in a row
	refused int                       // sends Redis answered with an error of its own
	fresh   bool                      // the admission never reached Redis (the breaker was open): no record to look for
	state   chargeState
	at      time.Time     // when it was admitted (monotonic: this process's clock)
	done    chan struct{} // while flying: closed when the flight ends
}

// chargeBook holds a store's charges.
type chargeBook struct {
	mu       sync.Mutex
	byID     map[string]*charge
	queue    []*charge // pending, oldest first
	first    *charge   // pending, to be sent before the queue (a failed one that may have landed)
	order    []*charge // every tracked charge, oldest first, for expiry
	flushing bool
	closed   bool
	wg       sync.WaitGroup
	queued   atomic.Int64 // pending (queue and first), read without the lock
	nsent    int          // tracked charges in chargeSent, awaiting their reconcile
	sent     atomic.Int64
	lost     atomic.Int64
}

// Charges returns how many admissions the local fallback allowed were
// charged to Redis once it answered again (or found decided there: their
// reply had been lost), and how many were not: without an ID, beyond the
// admissions it tracks at once, refused by Redis with an error of its own
// three times, or still unsent when the store closed. See
// WithFallbackLocal.
func (s *Store) Charges() (sent, lost int64) {
	return s.charges.sent.Load(), s.charges.lost.Load()
}

// noteCharge records an admission the fallback allowed, to charge to
// Redis when it answers. Without an identity it is not charged (a charge
// must be safe to resend, and its reconcile must find it), and is counted
// lost.
func (s *Store) noteCharge(r llmrate.AdmitRequest, fresh bool) {
	b := &s.charges
	if r.ID == "" {
		b.lost.Add(1)
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byID == nil {
		b.byID = make(map[string]*charge)
	}
	if _, ok := b.byID[r.ID]; ok {
		return // a repeat the fallback answered from its identity table
	}
	b.expire(now)
	if len(b.byID) >= maxCharges {
		b.forgetSent()
	}
	if b.closed || len(b.byID) >= maxCharges {
		b.lost.Add(1)
		return
	}
	// The plan's figures are the caller's, not to be kept past the call:
	// a copy of their own (a fallback admission under a plan is rare).
	r.KeyPlan, r.WorkspacePlan = copyPlan(r.KeyPlan), copyPlan(r.WorkspacePlan)
	c := &charge{r: r, at: now, fresh: fresh}
	b.byID[r.ID] = c
	b.queue = append(b.queue, c)
	b.order = append(b.order, c)
	b.queued.Store(int64(b.pending()))
}

// expire forgets charged admissions whose reconcile did not come within
// chargeLife, and the reconciled ones (b.mu held). Pending and flying ones
// stay, and those behind them: Redis has not seen them yet.
func (b *chargeBook) expire(now time.Time) {
	i := 0
	for ; i < len(b.order); i++ {
		c := b.order[i]
		if b.byID[c.r.ID] != c {
			continue // reconciled
		}
		if c.state != chargeSent || now.Sub(c.at) < chargeLife {
			break
		}
		b.drop(c)
	}
	clear(b.order[:i])
	b.order = b.order[i:]
	if len(b.order) > 2*len(b.byID)+1024 {
		keep := make([]*charge, 0, len(b.byID))
		for _, c := range b.order {
			if b.byID[c.r.ID] == c {
				keep = append(keep, c)
			}
		}
		b.order = keep
	}
}

// pending is how many charges wait to be sent (b.mu held).
func (b *chargeBook) pending() int {
	n := len(b.queue)
	if b.first != nil {
		n++
	}
	return n
}

// drop forgets tracked charge c (b.mu held).
func (b *chargeBook) drop(c *charge) {
	if b.byID[c.r.ID] != c {
		return
	}
	delete(b.byID, c.r.ID)
	if c.state == chargeSent {
		b.nsent--
	}
}

// forgetSent forgets the oldest quarter of the tracked admissions that are
// charged and await their reconcile (b.mu held), to make room for pending
// ones: a reconcile that comes for one of those goes to the fallback alone.
func (b *chargeBook) forgetSent() {
	if b.nsent == 0 {
		return // every one pending: nothing to forget, and no walk
	}
	n := maxCharges / 4
	for _, c := range b.order {
		if n == 0 {
			break
		}
		if c.state == chargeSent && b.byID[c.r.ID] == c {
			b.drop(c)
			n--
		}
	}
	b.expire(time.Now()) // drops them from order
}

// chargeReconcile sends a fallback admission's reconcile, already applied
// to the fallback, where its charge makes it due: folded into the charge
// while that is pending; to Redis once the charge is there; nowhere else
// when the admission is not tracked.
func (s *Store) chargeReconcile(ctx context.Context, r llmrate.ReconcileRequest) error {
	if r.ID == "" {
		return nil
	}
	b := &s.charges
	b.mu.Lock()
	c := b.byID[r.ID]
	for c != nil && c.state == chargeFlying {
		done := c.done
		b.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.mu.Lock()
		c = b.byID[r.ID]
	}
	if c == nil {
		b.mu.Unlock()
		return nil
	}
	if c.state == chargePending {
		if c.tried {
			b.mu.Unlock()
			return errChargeUnsettled
		}
		rc := r
		c.rec = &rc
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	if err := s.reconcileRedis(ctx, r, false); err != nil {
		return err // the limiter retries: the fallback applies it once, Redis once
	}
	b.mu.Lock()
	b.drop(c)
	b.mu.Unlock()
	return nil
}

// kickCharges starts the goroutine that sends pending charges, unless one
// runs, none is pending or the store is closed. Redis has just answered.
func (s *Store) kickCharges() {
	b := &s.charges
	if b.queued.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.flushing || b.closed || b.pending() == 0 {
		return
	}
	b.flushing = true
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		s.flushCharges(context.Background(), true)
	}()
}

// flushCharges sends pending charges, oldest first, until none is left or
// one fails (it stays pending, at the back, or first when its debit may
// have landed: the next answer from Redis starts again), or ctx is done,
// or, in the background, the store closes; then clears flushing.
func (s *Store) flushCharges(ctx context.Context, background bool) {
	b := &s.charges
	for {
		b.mu.Lock()
		if b.pending() == 0 || ctx.Err() != nil || background && b.closed {
			b.flushing = false
			b.mu.Unlock()
			return
		}
		c := b.first
		if c != nil {
			b.first = nil
		} else {
			c = b.queue[0]
			b.queue[0] = nil
			b.queue = b.queue[1:]
		}
		b.queued.Store(int64(b.pending()))
		c.state, c.done = chargeFlying, make(chan struct{})
		rec, fresh := c.rec, c.fresh
		b.mu.Unlock()

		debited, err := s.sendCharge(ctx, c.r, rec, fresh)

		b.mu.Lock()
		c.tried = c.tried || debited
		if err != nil {
			// One whose debit may have landed goes first next time (its
			// reconcile waits for it), up to chargeFirstTries times in a
			// row; any other goes to the back, so that a charge Redis
			// keeps failing does not hold the others.
			c.state = chargePending
			var rerr redis.Error
			if errors.As(err, &rerr) {
				c.refused++
			}
			switch c.fails++; {
			case c.refused >= chargeMaxRefusals:
				b.lost.Add(1)
				b.drop(c)
			case c.tried && c.fails <= chargeFirstTries:
				b.first = c
			default:
				b.queue = append(b.queue, c)
			}
			b.queued.Store(int64(b.pending()))
			b.flushing = false
		} else {
			c.state = chargeSent
			b.nsent++
			b.sent.Add(1)
			if rec != nil {
				// Reconciled already: nothing more comes for it. (A
				// reconcile that comes while it flies waits for the
				// flight, then goes to Redis.)
				b.drop(c)
			}
		}
		close(c.done)
		b.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// sendCharge debits Redis for admission r, which the fallback allowed: its
// reconcile rec folded in when it came first. When Redis had allowed r
// itself (its reply lost), only rec is sent; a fresh admission (one that
// never reached Redis) has no record to look for. debited reports whether
// the debit (or rec) was sent, and so may have landed.
func (s *Store) sendCharge(ctx context.Context, r llmrate.AdmitRequest, rec *llmrate.ReconcileRequest, fresh bool) (debited bool, err error) {
	if !s.up(ctx) {
		return false, errDown
	}
	decided := false // by Redis itself: only rec is due there
	if !fresh {
		_, w := s.names(r.Key, r.Workspace, r.Model, r.Solo)
		kind := byte('a')
		switch {
		case quotaAdmit(&r):
			kind = 'q' // quota.go
		case admitsW(&r):
			kind = 'x'
		}
		v, err := s.run(ctx, existsScript, []string{idKey(w, kind, r.ID)}, nil, true)
		if err != nil {
			return false, err
		}
		n, _ := v.(int64)
		decided = n == 1
	}
	var c llmrate.ReconcileRequest
	switch {
	case decided && rec == nil:
		return false, nil // Redis debited it: its reconcile goes there
	case decided:
		c = *rec
	case rec != nil && rec.Refund:
		return false, nil // not forwarded after all: nothing consumed
	default:
		c = llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, Model: r.Model,
			KeyLimits: r.KeyLimits, WorkspaceLimits: r.WorkspaceLimits, KeyPlan: r.KeyPlan, WorkspacePlan: r.WorkspacePlan,
			Solo: r.Solo, ID: r.ID, Actual: r.Tokens, InputActual: max(0, r.InputTokens)}
		if rec != nil {
			c.Actual, c.InputActual, c.OutputActual = rec.Actual, rec.InputActual, rec.OutputActual
		}
	}
	err = s.reconcileRedis(ctx, c, !decided)
	return !errors.Is(err, errDown), err // errDown: refused by the breaker, nothing sent
}

// closeCharges stops charging in the background and sends what is pending
// until ctx is done; what is left is counted lost.
func (s *Store) closeCharges(ctx context.Context) {
	b := &s.charges
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait() // the background flusher stops after its charge in flight: two calls at most, each bounded by the store's timeout
	b.mu.Lock()
	b.flushing = true
	b.mu.Unlock()
	s.flushCharges(ctx, false)
	b.mu.Lock()
	b.lost.Add(int64(b.pending()))
	if b.first != nil {
		b.drop(b.first)
		b.first = nil
	}
	for _, c := range b.queue {
		b.drop(c)
	}
	b.queue = nil
	b.queued.Store(0)
	b.mu.Unlock()
}

// copyPlan returns a copy of the plan's figures p points to (nil for nil).
func copyPlan(p *llmrate.Limits) *llmrate.Limits {
	if p == nil {
		return nil
	}
	c := *p
	c.Windows = append([]llmrate.Window(nil), p.Windows...)
	return &c
}

package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmrate/llmrate"
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
// one fails; each carries an identity, so a resent one is applied once.
// At most maxCharges admissions are tracked: past that, a fallback
// admission is not charged, and is counted (Charges' lost), as are the
// charges still unsent when the store is closed.

// maxCharges bounds the admissions tracked for charging (pending, or
// charged and awaiting their reconcile).
const maxCharges = 1 << 16

// chargeLife is how long a charged admission waits for its reconcile:
// past it, a reconcile goes to the fallback alone, and Redis keeps the
// estimate (no longer than the longest response the limiter meters, in
// practice; a reconcile whose usage equals the estimate never comes).
const chargeLife = 10 * time.Minute

// chargeState is where one fallback admission's charge stands.
type chargeState uint8

const (
	chargePending chargeState = iota // waiting to be sent
	chargeFlying                     // being sent
	chargeSent                       // debited in Redis (by the charge, or by Redis's own decision)
)

// charge is one fallback admission to charge to Redis.
type charge struct {
	r     llmrate.AdmitRequest
	rec   *llmrate.ReconcileRequest // its reconcile, when it came first
	state chargeState
	at    time.Time     // when it was admitted (monotonic: this process's clock)
	done  chan struct{} // while flying: closed when the flight ends
}

// chargeBook holds a store's charges.
type chargeBook struct {
	mu       sync.Mutex
	byID     map[string]*charge
	queue    []*charge // pending, oldest first
	order    []*charge // every tracked charge, oldest first, for expiry
	flushing bool
	closed   bool
	wg       sync.WaitGroup
	queued   atomic.Int64 // len(queue), read without the lock
	sent     atomic.Int64
	lost     atomic.Int64
}

// Charges returns how many admissions the local fallback allowed were
// charged to Redis once it answered again (or found decided there: their
// reply had been lost), and how many were not: beyond the charges it
// tracks at once, or still unsent when the store closed. See
// WithFallbackLocal.
func (s *Store) Charges() (sent, lost int64) {
	return s.charges.sent.Load(), s.charges.lost.Load()
}

// noteCharge records an admission the fallback allowed, to charge to
// Redis when it answers. Without an identity it is not charged: a charge
// must be safe to resend, and its reconcile must find it.
func (s *Store) noteCharge(r llmrate.AdmitRequest) {
	if r.ID == "" {
		return
	}
	b := &s.charges
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
	if b.closed || len(b.byID) >= maxCharges {
		b.lost.Add(1)
		return
	}
	c := &charge{r: r, at: now}
	b.byID[r.ID] = c
	b.queue = append(b.queue, c)
	b.order = append(b.order, c)
	b.queued.Store(int64(len(b.queue)))
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
		delete(b.byID, c.r.ID)
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
		rc := r
		c.rec = &rc
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	r.Receipt = ""
	if err := s.reconcileRedis(ctx, r, false); err != nil {
		return err // the limiter retries: the fallback applies it once, Redis once
	}
	b.mu.Lock()
	if b.byID[r.ID] == c {
		delete(b.byID, r.ID)
	}
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
	if b.flushing || b.closed || len(b.queue) == 0 {
		return
	}
	b.flushing = true
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		s.flushCharges(context.Background())
	}()
}

// flushCharges sends pending charges, oldest first, until none is left or
// one fails (it stays pending: the next answer from Redis starts again),
// then clears flushing.
func (s *Store) flushCharges(ctx context.Context) {
	b := &s.charges
	for {
		b.mu.Lock()
		if len(b.queue) == 0 || ctx.Err() != nil {
			b.flushing = false
			b.mu.Unlock()
			return
		}
		c := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.queued.Store(int64(len(b.queue)))
		c.state, c.done = chargeFlying, make(chan struct{})
		rec := c.rec
		b.mu.Unlock()

		err := s.sendCharge(ctx, c.r, rec)

		b.mu.Lock()
		if err != nil {
			c.state = chargePending
			b.queue = append([]*charge{c}, b.queue...)
			b.queued.Store(int64(len(b.queue)))
			b.flushing = false
		} else {
			c.state = chargeSent
			b.sent.Add(1)
			if rec != nil {
				// Reconciled already: nothing more comes for it. (A
				// reconcile that comes while it flies waits for the
				// flight, then goes to Redis.)
				delete(b.byID, c.r.ID)
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
// itself (its reply lost), only rec is sent.
func (s *Store) sendCharge(ctx context.Context, r llmrate.AdmitRequest, rec *llmrate.ReconcileRequest) error {
	_, w := s.names(r.Key, r.Workspace, r.Model, r.Solo)
	kind := byte('a')
	if r.Reserve > 0 || windowed(r.KeyLimits, r.WorkspaceLimits) {
		kind = 'x' // admitW's record
	}
	cctx, cancel := s.bound(ctx)
	n, err := s.c.Exists(cctx, idKey(w, kind, r.ID)).Result()
	cancel()
	if err != nil {
		return s.failed(err)
	}
	if n == 1 {
		if rec == nil {
			return nil // Redis debited it: its reconcile goes there
		}
		rr := *rec
		rr.Receipt = ""
		return s.reconcileRedis(ctx, rr, false)
	}
	c := llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, Model: r.Model,
		KeyLimits: r.KeyLimits, WorkspaceLimits: r.WorkspaceLimits, Solo: r.Solo, ID: r.ID,
		Actual: r.Tokens, InputActual: max(0, r.InputTokens)}
	if rec != nil {
		if rec.Refund {
			return nil // not forwarded after all: nothing consumed
		}
		c.Actual, c.InputActual, c.OutputActual = rec.Actual, rec.InputActual, rec.OutputActual
	}
	return s.reconcileRedis(ctx, c, true)
}

// closeCharges stops charging in the background and sends what is pending
// until ctx is done; what is left is counted lost.
func (s *Store) closeCharges(ctx context.Context) {
	b := &s.charges
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait() // one call at a time, each bounded by the store's timeout
	b.mu.Lock()
	b.flushing = true
	b.mu.Unlock()
	s.flushCharges(ctx)
	b.mu.Lock()
	b.lost.Add(int64(len(b.queue)))
	for _, c := range b.queue {
		delete(b.byID, c.r.ID)
	}
	b.queue = nil
	b.queued.Store(0)
	b.mu.Unlock()
}

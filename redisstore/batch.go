package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed batch.lua
	batchLua    string
	batchScript = redis.NewScript(arithLua + admitOneLua + batchLua)
)

// WithBatching sets the most admissions one script call carries (opt-in;
// default 1: one call per admission). An admission that finds no call in
// flight is sent at once, alone; those that arrive while a call is in
// flight go together in the next call, up to max per call: one round trip
// and one script run for many admissions, each still atomic and checked in
// arrival order. Under concurrency this saves the Redis server and the
// client most of their per-call work, which is what bounds the admissions
// per second of a busy gateway (see BENCHMARKS.md). No goroutine is
// started: the caller whose admission finds no call in flight runs the
// calls, and hands over to a waiting caller once its own admission is
// answered. Reconciles are not batched.
//
// The price is latency headroom: an admission that arrives during a call
// waits for it, then for its own, so it needs about two round trips within
// its deadline where an unbatched one needs one. A call carrying several
// admissions runs until the earliest of their deadlines (or the store's
// timeout); an admission whose deadline passes while it still waits to be
// sent is withdrawn, never sent, and decided by the local fallback
// (WithFallbackLocal) or failed; when a call times out, every admission in
// it gets the fallback's answer or the error (and may still have been
// applied in Redis, as any timed-out call may). Through the limiter every
// admission has the same time allowed, so the earliest deadline is the
// first arrival's; a direct caller mixing short and long deadlines in
// concurrent admissions lets the short ones end calls the long ones share.
// So with batching, keep the store's timeout under half the limiter's
// (WithStoreTimeout) and both well above Redis's latency. As without
// batching, calls end by their deadlines whatever the client (see
// HonoursContext).
//
// max must be at least 1; over 1 it is refused on other clients than a
// single-node or Sentinel *redis.Client (a Cluster client or Ring routes a
// call by its first key, and a batch names many), and with WithLeases.
func WithBatching(max int) Option {
	return optionFunc(func(c *config) { c.batch, c.batchSet = max, true })
}

type batcher struct {
	max     int
	mu      sync.Mutex
	queue   []*pending
	running bool
}

type pending struct {
	r    llmrate.AdmitRequest
	k, w string
	dl   time.Time // the caller's deadline; zero when it has none
	d    llmrate.Decision
	err  error
	done chan struct{} // closed when d and err are set
	lead chan struct{} // closed when this caller is to run the next calls
}

// admitBatched queues r and waits for its answer, running calls itself
// while it is the leader.
func (s *Store) admitBatched(ctx context.Context, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	k, w := s.names(r.Key, r.Workspace, r.Model, r.Solo)
	b := s.batch
	b.mu.Lock()
	if !b.running {
		// No call in flight (and so none waiting): this admission goes at
		// once, alone, and its caller leads the calls of those that arrive
		// meanwhile, as the first caller of a run does below, without
		// queueing itself.
		b.running = true
		b.mu.Unlock()
		defer func() {
			b.mu.Lock()
			b.handOffLocked()
			b.mu.Unlock()
		}()
		res, err := s.call(ctx, []*pending{{r: r, k: k, w: w}})
		if err != nil {
			return s.admitLocal(ctx, r, err)
		}
		d := decisionFrom(res)
		s.follow(&r, &d)
		return d, nil
	}
	p := &pending{r: r, k: k, w: w, done: make(chan struct{}), lead: make(chan struct{})}
	p.dl, _ = ctx.Deadline()
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	// A call is in flight: wait for an answer, or for the lead (handed to
	// the first waiting caller when the leader's own admission is
	// answered), which a caller takes at most once.
	lead := p.lead
	for {
		select {
		case <-p.done:
			return p.d, p.err
		case <-lead:
			s.runBatches(p)
			lead = nil
		case <-ctx.Done():
			select {
			case <-p.done: // answered after all: use it
				return p.d, p.err
			default:
			}
			if s.withdraw(p, lead == nil) {
				// Never sent: Redis has not counted it, the fallback may.
				return s.admitLocal(ctx, r, ctx.Err())
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// Sent: its call ends by the earliest deadline among its
				// admissions, this one's or sooner, so its answer (Redis's,
				// or the fallback's when the call failed) is due now.
				<-p.done
				return p.d, p.err
			}
			// Cancelled: return at once; the call in flight may still
			// apply the admission in Redis.
			return llmrate.Decision{}, ctx.Err()
		}
	}
}

// withdraw takes a caller that gave up out of the queue and reports whether
// it was still there (never sent); if it had been handed the lead
// meanwhile (and not used it: led is false), it passes the lead on. Handing
// over and withdrawing happen under one lock, so the lead is never lost nor
// doubled.
func (s *Store) withdraw(p *pending, led bool) (queued bool) {
	b := s.batch
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, q := range b.queue {
		if q == p {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			queued = true
			break
		}
	}
	if led {
		return queued
	}
	select {
	case <-p.lead:
		b.handOffLocked()
	default:
	}
	return queued
}

// handOffLocked gives the lead to the first waiting caller, or ends the run
// when none waits. b.mu is held.
func (b *batcher) handOffLocked() {
	if len(b.queue) == 0 {
		b.running = false
		return
	}
	close(b.queue[0].lead)
}

// runBatches runs calls until me is answered, then hands the lead to the
// first waiting caller, or stops when none waits.
func (s *Store) runBatches(me *pending) {
	b := s.batch
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.max)
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		batch := append([]*pending(nil), b.queue[:n]...)
		b.queue = b.queue[n:]
		b.mu.Unlock()
		s.runBatch(batch)
		select {
		case <-me.done:
			b.mu.Lock()
			b.handOffLocked()
			b.mu.Unlock()
			return
		default:
		}
	}
}

// runBatch makes one script call for batch and answers every admission in
// it (with the fallback's answers if the call fails). An admission whose
// caller's deadline has already passed is not sent: it is answered as a
// failed call would be.
func (s *Store) runBatch(batch []*pending) {
	now := time.Now()
	live := batch[:0:0]
	for _, p := range batch {
		if !p.dl.IsZero() && !now.Before(p.dl) {
			p.d, p.err = s.admitLocal(context.Background(), p.r, context.DeadlineExceeded)
			close(p.done)
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	// The call ends by the earliest deadline among its admissions, so that
	// each caller (the one running it included) is answered within its own;
	// the others then get the fallback's answer, or the error.
	ctx := context.Background()
	var dl time.Time
	for _, p := range live {
		if !p.dl.IsZero() && (dl.IsZero() || p.dl.Before(dl)) {
			dl = p.dl
		}
	}
	if !dl.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	res, err := s.call(ctx, live)
	for i, p := range live {
		if err != nil {
			p.d, p.err = s.admitLocal(context.Background(), p.r, err)
		} else {
			p.d = decisionFrom(res[8*i : 8*i+8])
			s.follow(&p.r, &p.d)
		}
		close(p.done)
	}
}

// call runs the admissions of batch in one script call and returns their
// 8 results each, or the error. One admission is sent as admit.lua, which
// costs the server less than a batch of one. ctx ends the call: through
// the limiter it is the one caller's context, or for a batch it ends at the
// earliest deadline among its admissions; the store's timeout bounds it
// too (see run, which counts failures and resends a call whose reply was
// lost when every admission in it has an ID).
func (s *Store) call(ctx context.Context, batch []*pending) ([]int64, error) {
	n := len(batch)
	resend := true
	for _, p := range batch {
		resend = resend && p.r.ID != ""
	}
	life := admitIDLife.Milliseconds()
	var v any
	var err error
	if n == 1 {
		p := batch[0]
		keys := []string{p.w} // admit.lua's: the workspace's entry, the key's unless solo, the record
		if !p.r.Solo {
			keys = append(keys, p.k)
		}
		if p.r.ID != "" {
			keys = append(keys, idKey(p.w, 'a', p.r.ID))
		}
		v, err = s.run(ctx, admitScript, keys, []any{admitAloneArg(p.r, s.clock)}, resend)
		if err != nil {
			return nil, err
		}
		res := make([]int64, 8)
		if err := admitReply(v, res); err != nil {
			return nil, s.failed(err)
		}
		return res, nil
	} else {
		keys := make([]string, 0, 3*n)
		args := make([]any, 0, 2+n)
		args = append(args, s.nowArg(), life)
		for _, p := range batch {
			id := ""
			if p.r.ID != "" {
				id = idKey(p.w, 'a', p.r.ID)
			}
			keys = append(keys, p.k, p.w, id)
			args = append(args, admitArg(p.r))
		}
		v, err = s.run(ctx, batchScript, keys, args, resend)
	}
	if err != nil {
		return nil, err
	}
	res, err := int64s(v, 8*n)
	if err != nil {
		return nil, s.failed(err)
	}
	return res, nil
}

// admitReply converts admit.lua's reply (little-endian doubles: an
// admission's four levels, or a refusal's bucket, wait, never and four
// levels) into admit_one's eight results, in res.
func admitReply(v any, res []int64) error {
	b, ok := v.(string)
	if !ok || (len(b) != 32 && len(b) != 56) {
		return fmt.Errorf("redisstore: admission script returned %T of %d bytes, want 32 or 56", v, len(b))
	}
	clear(res)
	at := 1 // a refusal: its seven values go to results 1 to 7
	if len(b) == 32 {
		res[0], at = 1, 4 // an admission: refused, retry and never are 0
	}
	for i := 0; i < len(b); i += 8 {
		bits := uint64(b[i]) | uint64(b[i+1])<<8 | uint64(b[i+2])<<16 | uint64(b[i+3])<<24 |
			uint64(b[i+4])<<32 | uint64(b[i+5])<<40 | uint64(b[i+6])<<48 | uint64(b[i+7])<<56
		res[at+i/8] = int64(math.Float64frombits(bits))
	}
	return nil
}

func decisionFrom(res []int64) llmrate.Decision {
	return llmrate.Decision{
		Allowed:    res[0] == 1,
		Refused:    llmrate.Bucket(res[1]),
		RetryAfter: time.Duration(res[2]) * time.Second,
		NeverFits:  res[3] == 1,
		Remaining:  [4]int64{res[4], res[5], res[6], res[7]},
	}
}

package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
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

// WithBatching sets the most admissions one script call carries. An
// admission that finds no call in flight is sent at once, alone; those that
// arrive while a call is in flight go together in the next call, up to max
// per call: one round trip and one script run for many admissions, each
// still atomic and checked in arrival order. Under concurrency this costs
// an admission at most about one more round trip of latency (it waits for
// the call in flight), and saves the Redis server and the client most of
// their per-call work, which is what bounds the admissions per second of a
// busy gateway (see BENCHMARKS.md). No goroutine is started: the caller
// whose admission finds no call in flight runs the calls, and hands over to
// a waiting caller once its own admission is answered. Reconciles are not
// batched.
//
// Default: DefaultBatch on a single-node or Sentinel client (a
// *redis.Client) without WithLeases; one admission per call on a Cluster
// client or Ring (which route a call by its first key, and a batch names
// many) or with WithLeases. max 1 turns batching off: every admission is
// its own call, run on its own pooled connection. max must be at least 1;
// over 1 it is refused on other clients than *redis.Client, and with
// WithLeases.
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
	d    llmrate.Decision
	err  error
	done chan struct{} // closed when d and err are set
	lead chan struct{} // closed when this caller is to run the next calls
}

// admitBatched queues r and waits for its answer, running calls itself
// while it is the leader.
func (s *Store) admitBatched(ctx context.Context, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	k, w := s.names(r.Key, r.Workspace, r.Model, r.Solo)
	p := &pending{r: r, k: k, w: w, done: make(chan struct{}), lead: make(chan struct{})}
	b := s.batch
	b.mu.Lock()
	b.queue = append(b.queue, p)
	leader := !b.running
	b.running = true
	b.mu.Unlock()
	// A caller leads at most once: the first caller of a run, or the one
	// handed the lead; after leading, its own admission is answered.
	lead := p.lead
	if leader {
		s.runBatches(p)
		lead = nil
	}
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
			s.withdraw(p, lead == nil)
			// The admission may still be decided in a call in flight; the
			// limiter fails open on this error either way.
			return llmrate.Decision{}, ctx.Err()
		}
	}
}

// withdraw takes a caller that gave up out of the queue; if it had been
// handed the lead meanwhile (and not used it: led is false), it passes the
// lead on. Handing over and withdrawing happen under one lock, so the lead
// is never lost nor doubled.
func (s *Store) withdraw(p *pending, led bool) {
	b := s.batch
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, q := range b.queue {
		if q == p {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			break
		}
	}
	if led {
		return
	}
	select {
	case <-p.lead:
		b.handOffLocked()
	default:
	}
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
// it (with the fallback's answers if the call fails). A batch of one is
// sent as an unbatched admission (admit.lua, which costs the server less).
// The call is bounded by the store's timeout alone: a caller that gives up
// withdraws (admitBatched), and its deadline does not end a call that
// others' admissions may share, nor count as a Redis failure.
func (s *Store) runBatch(batch []*pending) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	var res []int64
	var err error
	if len(batch) == 1 {
		p := batch[0]
		res, err = admitScript.Run(ctx, s.c, []string{p.k, p.w}, s.nowArg(), admitArg(p.r)).Int64Slice()
	} else {
		keys := make([]string, 0, 2*len(batch))
		args := make([]any, 0, 1+len(batch))
		args = append(args, s.nowArg())
		for _, p := range batch {
			keys = append(keys, p.k, p.w)
			args = append(args, admitArg(p.r))
		}
		res, err = batchScript.Run(ctx, s.c, keys, args...).Int64Slice()
	}
	if err == nil && len(res) != 8*len(batch) {
		err = errors.New("admission script returned " + strconv.Itoa(len(res)) + " values for " + strconv.Itoa(len(batch)) + " admissions")
	}
	if err != nil {
		err = s.failed(err)
		for _, p := range batch {
			p.d, p.err = s.admitLocal(ctx, p.r, err)
			close(p.done)
		}
		return
	}
	s.succeeded()
	for i, p := range batch {
		p.d = decisionFrom(res[8*i : 8*i+8])
		close(p.done)
	}
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

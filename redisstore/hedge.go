package redisstore

import (
	"context"
	"errors"
	"math/bits"
	"net"
	"sync/atomic"
	"time"

	"github.com/llmrate/llmrate/internal/deadline"
	"github.com/redis/go-redis/v9"
)

// Hedging: a call whose every admission and reconcile has an identity
// (the calls the store may resend) and that is still unanswered after its
// first attempt's wait (a few hedge delays: see inline), then after each
// hedge delay, is sent again, on another connection, with the same
// identities; Redis answers a repeat with its first answer and applies
// nothing twice, so whichever answer comes first is the call's, and a
// later one is discarded. This is what decides a call whose reply was
// lost on a connection that stays open (no close, no reset: nothing
// tells go-redis), which would otherwise wait out the whole WithTimeout
// and fail; and it cuts the tail a slow connection adds.
//
// The delay is learned: the 99th percentile of the latencies of recent
// answered calls (a histogram with four buckets per power of two, so
// rounded up by at most a quarter, over about the last hedgeWindow to
// 2 × hedgeWindow calls), so that, of calls whose attempts run on
// goroutines (a client without ContextTimeoutEnabled, or a call after its
// inline first attempt), about 1% hedge on a quiet network (at most 2% is
// the goal: each needless hedge is load on a shared Redis); a first
// attempt inline waits longer (inlineWaitFactor, below), so with
// ContextTimeoutEnabled almost none do. It is bounded within the
// timeout: at most a quarter of the time the call has (WithTimeout, or
// its caller's deadline when nearer), so up to hedgeMaxPerCall hedges,
// one a delay after the other, each fit with time for a round trip; and
// at least hedgeMinDelay (or that quarter when shorter): below it a
// hedge saves too little to be worth the load. Until the first window is
// full the delay is that quarter.
//
// The extra load is bounded per store: at most hedgeMaxInFlight hedges in
// flight at once, and, per window of hedgeWindow calls, at most
// hedgeBurst hedges plus hedgeBudget of the window's calls so far. A
// hedge is never sent while the breaker is open, nor unless Redis is
// taken to be answering (live: so not on a store's first call, which
// dials and loads the script), nor with less
// than a delay left before the call's deadline: a hedge is for a reply
// lost here and there, not for a Redis that answers no one, where it
// would only add connections and goroutines waiting for nothing.
//
// A hedge gets another connection from go-redis's pool: the call it
// hedges holds its own connection (checked out) until it ends, so the
// pool hands the hedge an idle one or dials a new one; and a hedge is
// sent only when the pool has an idle connection or room to dial one
// (connFree), so it never queues for a turn, behind the silent connection
// or any other.
const (
	hedgeQuantile    = 0.99
	hedgeMinDelay    = 500 * time.Microsecond
	hedgeMaxPerCall  = 3
	hedgeMaxInFlight = 16
	hedgeWindow      = 1024
	hedgeBurst       = 16
	hedgeBudget      = 0.10
)

// latBuckets is the latency histogram's size (latIndex): one bucket for
// each of 0 to 3 ns, then four per power of two.
const latBuckets = 4 * 63

// hedger is a store's hedging state. Its fields are grouped by who
// writes them, a whole cache line apart (so on lines of their own
// wherever the Store lands): a field every call reads, on a line another
// core's calls keep writing, costs a cache miss per call
// (BenchmarkHedgerBookkeeping: at two cores, about 250 ns per call with
// these fields side by side; TestHedgerFieldsApart pins the layout).
type hedger struct {
	_ [cacheLine]byte // apart from the Store's fields before it

	// Read by every call; written once a window.
	delay atomic.Int64 // the learned delay, ns; 0 until the first window
	_     [cacheLine]byte

	// Written by every call.
	calls  atomic.Int64 // hedgeable calls made
	active atomic.Int64 // hedgeable calls in flight (inline: alone or not)
	_      [cacheLine]byte

	// Read by every call; written at most once per hedgeAnsweredGrain.
	answered atomic.Int64 // when an attempt was last answered (mono ns, to within hedgeAnsweredGrain; 0: never)
	_        [cacheLine]byte

	// Written by hedges, and at a window's end.
	spent    atomic.Int64 // hedges sent in the current window of calls
	inFlight atomic.Int64 // hedges in flight
	learning atomic.Bool  // a window's end is being processed
	_        [cacheLine]byte

	hist [latBuckets]atomic.Int64 // written by every answered call
}

// cacheLine is how far apart padding keeps groups of fields: a line on
// amd64 and most arm64 cores (64 bytes).
const cacheLine = 64

// latIndex is the histogram bucket of d: d itself below 4 ns, then four
// buckets per power of two (v in [2^(e−1), 2^e) with e ≥ 3 splits by its
// two bits below the top one).
func latIndex(d time.Duration) int {
	v := uint64(max(d, 0))
	e := bits.Len64(v)
	if e < 3 {
		return int(v) // 0..3
	}
	return 4*(e-2) + int(v>>(e-3)&3)
}

// latUpper is the longest latency in bucket i.
func latUpper(i int) time.Duration {
	if i < 4 {
		return time.Duration(i)
	}
	e, sub := i/4+2, uint64(i%4)
	return time.Duration((4+sub+1)<<(e-3) - 1)
}

// observe records the latency d of a call answered at end.
func (h *hedger) observe(d time.Duration, end time.Time) {
	h.hist[latIndex(d)].Add(1)
	if now := mono(end); now-h.answered.Load() > int64(hedgeAnsweredGrain) {
		h.answered.Store(now)
	}
}

// live reports whether Redis may be taken to be answering, for a hedge:
// it answered a call of this store within the last WithTimeout, or it has
// answered some call and no failure has counted towards the breaker since
// the last success (consecutive is 0: on a gateway with little traffic,
// the last call succeeded, however long ago). Not on a store's first
// call, nor after a failure in the breaker's row while nothing answers: a
// Redis that answers no one gets no hedges. now is the time.
func (s *Store) live(now time.Time) bool {
	return s.hedge.answering(now, s.timeout) || s.hedge.answered.Load() != 0 && s.consecutive.Load() == 0
}

// hedgeAnsweredGrain is how stale the time of the last answer may be (it
// is written at most about once per grain, not on every answer).
const hedgeAnsweredGrain = time.Millisecond

// answering reports whether Redis answered an attempt of this store
// within the last within, as of now.
func (h *hedger) answering(now time.Time, within time.Duration) bool {
	a := h.answered.Load()
	return a != 0 && mono(now)-a <= int64(within+hedgeAnsweredGrain) // 0: never answered
}

// called counts a hedgeable call; every hedgeWindow calls it learns the
// delay from the histogram, halves the histogram (older windows weigh
// less) and opens a new window of the budget.
func (h *hedger) called() {
	if h.calls.Add(1)%hedgeWindow != 0 || !h.learning.CompareAndSwap(false, true) {
		return
	}
	defer h.learning.Store(false)
	h.spent.Store(0)
	var counts [latBuckets]int64
	var total int64
	for i := range h.hist {
		counts[i] = h.hist[i].Load()
		total += counts[i]
	}
	if total < hedgeWindow/2 {
		return // too few answers to say (most calls failed): keep the delay
	}
	want := int64(float64(total)*hedgeQuantile + 0.5)
	var cum int64
	for i, n := range counts {
		if cum += n; cum >= want {
			h.delay.Store(int64(latUpper(i)))
			break
		}
	}
	for i := range h.hist {
		h.hist[i].Add(-counts[i] / 2)
	}
}

// delayFor is the hedge delay, at now, of a call that has until ctx's
// deadline: the learned delay, bounded by [hedgeMinDelay, a quarter of the
// time the call has].
func (h *hedger) delayFor(ctx context.Context, now time.Time, timeout time.Duration) time.Duration {
	return h.delayLeft(timeLeftAt(ctx, now), timeout)
}

// delayLeft is delayFor of a call that has left before its deadline.
func (h *hedger) delayLeft(left, timeout time.Duration) time.Duration {
	hi := min(timeout, left) / 4
	d := time.Duration(h.delay.Load())
	if d == 0 {
		return max(hi, 0)
	}
	return max(min(d, hi), min(hedgeMinDelay, hi), 0)
}

// take reserves a hedge within the bounds (in flight, and the window's
// budget), or reports false.
func (h *hedger) take() bool {
	if h.inFlight.Add(1) > hedgeMaxInFlight {
		h.inFlight.Add(-1)
		return false
	}
	allowed := hedgeBurst + int64(float64(h.calls.Load()%hedgeWindow)*hedgeBudget)
	if h.spent.Add(1) > allowed {
		h.untake()
		return false
	}
	return true
}

// untake gives back a hedge take reserved and did not send.
func (h *hedger) untake() {
	h.spent.Add(-1)
	h.inFlight.Add(-1)
}

// attemptResult is one attempt's answer.
type attemptResult struct {
	v   any
	err error
}

// hedged runs an identified call (see run): an attempt now, and a hedge
// each hedge delay after while none has answered, within the bounds; the
// first answer wins. It returns when an attempt answers, when every
// attempt sent has failed, or at ctx's end, whichever comes first; an
// attempt still in flight then ends by ctx's deadline (or, on a client
// without ContextTimeoutEnabled, by its read timeout, holding one of the
// maxGuarded slots meanwhile), and its answer is discarded.
func (s *Store) hedged(ctx context.Context, now time.Time, script *redis.Script, keys []string, args []any) (any, error) {
	h := &s.hedge
	h.called()
	lone := h.active.Add(1) == 1
	// One return under the defer: the compiler then runs it in line
	// (open-coded), not through the runtime's defer records, which cost
	// about 160 instructions a call (a defer per return; see race).
	defer h.active.Add(-1)
	return s.hedgedFrom(ctx, now, script, keys, args, lone)
}

// hedgedFrom is hedged once the call is counted; lone: no other
// hedgeable call of the store was in flight.
func (s *Store) hedgedFrom(ctx context.Context, now time.Time, script *redis.Script, keys []string, args []any, lone bool) (any, error) {
	h := &s.hedge
	hedges := 0
	resend := false // the first attempt below is a hedge drawn from the bounds
	// Inline only once a delay is learned (the store's first hedgeWindow
	// calls run on goroutines): before, an inline wait is a guess, and a
	// slow start (a gateway starting under load, on busy cores) past it
	// closes every connection it times out, late replies with them, while
	// an attempt on a goroutine keeps reading to its call's deadline plus
	// WithTimeout beside its hedges (TestSlowStartKeepsConnections).
	if s.direct && !s.open.Load() && h.delay.Load() != 0 && s.live(now) {
		v, err, done := s.inline(ctx, now, script, keys, args)
		if done {
			return v, err
		}
		if err != nil {
			// The first attempt's reply is late or lost: the call is sent
			// again below, which counts as its first hedge. (With no
			// error, no attempt was made: the first is the one below.)
			// With other calls in flight it is a hedge within the
			// bounds, or not sent: a stall times out every call in
			// flight at once, and their resends must not double the load
			// on Redis.
			if !lone {
				if !s.connFree() || !h.take() {
					return nil, err
				}
				resend = true
			}
			hedges = 1
			s.hedges.Add(1)
		}
	}
	return s.race(ctx, script, keys, args, hedges, resend)
}

// race runs a call's attempts on goroutines: the first now (a hedge
// drawn from the bounds when resend; counted in Hedges when hedges is 1,
// the call's inline attempt having timed out), then a hedge each delay
// while none has answered, within the bounds; the first answer wins.
// Its two defers stay open-coded while returns × defers is at most 15
// (seven returns now): one return more would put them back on the
// runtime's defer records (go build -gcflags=-d=defer ./redisstore says).
func (s *Store) race(ctx context.Context, script *redis.Script, keys []string, args []any, hedges int, resend bool) (any, error) {
	h := &s.hedge
	ch := make(chan attemptResult, 1+hedgeMaxPerCall)
	// The attempts on goroutines end when this call returns: one still
	// queued for a connection gives up, a reply lost on a reset is not
	// sent again. The call's own context may outlive it (under the
	// limiter it ends at its deadline, or once every call ending in the
	// same millisecond returned and a call ending in another returned
	// after them: internal/deadline).
	gctx, gcancel := context.WithCancel(ctx)
	defer gcancel()
	actx := gctx
	if dl, ok := ctx.Deadline(); ok {
		actx = &attemptCtx{gctx, dl.Add(s.timeout)}
	}
	if !s.launch(actx, ch, script, keys, args, resend, hedges == 1) {
		if resend {
			h.untake()
		}
		return nil, errBusy
	}
	pending := 1
	delay := h.delayFor(ctx, time.Now(), s.timeout)
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case r := <-ch:
			if r.err == nil {
				return r.v, nil
			}
			if pending--; pending == 0 {
				return nil, r.err
			}
		case <-t.C:
			select {
			case r := <-ch: // the answer came with the timer (a stall of this process, say): no hedge
				if r.err == nil {
					return r.v, nil
				}
				if pending--; pending == 0 {
					return nil, r.err
				}
			default:
			}
			if now := time.Now(); !s.open.Load() && s.live(now) && timeLeftAt(ctx, now) >= delay && s.connFree() && h.take() {
				if s.launch(actx, ch, script, keys, args, true, true) {
					hedges++
					pending++
					s.hedges.Add(1)
				} else {
					h.untake()
				}
			}
			if hedges < hedgeMaxPerCall {
				t.Reset(delay)
			}
		case <-ctx.Done():
			select {
			case r := <-ch: // an answer that came with the deadline
				if r.err == nil {
					return r.v, nil
				}
			default:
			}
			return nil, ctx.Err()
		}
	}
}

// inlineWaitFactor is how many hedge delays a call's first attempt waits
// for its reply on the caller's goroutine (inline) before it is sent
// again, at least inlineWaitFloor and at most half the time the call has:
// at the default WithTimeout (30 ms) that half, 15 ms. More than one
// delay: a reply later than the wait costs its connection, not only a
// hedge; calls may queue for a connection of the pool and its handshake
// within their first attempt's time (a burst after a quiet spell, its
// delay learned at one call at a time, closed a fifth of the pool's
// connections at four delays; under the race detector on a slower
// machine, 64 dials through a proxy outlasted 50 ms), and a stall times
// them all out at once. The floor matters with a longer WithTimeout,
// where half of it would leave a lost reply waiting long. A lone call once
// waited only four delays (2 ms at the delay's floor): a read deadline
// that near cost about a tenth more of the client's CPU per admission at
// one call at a time, and of its throughput (the runtime's timers and
// poller, not this code; BENCHMARKS.md, "A near read deadline"); at
// 15 ms and beyond, nothing measurable.
const (
	inlineWaitFactor = 16
	inlineWaitFloor  = 100 * time.Millisecond
)

// inline runs a call's first attempt on the caller's goroutine, with no
// goroutine or channel of its own: handing each reply from an
// attempt's goroutine to the caller cost about a fifth of the throughput
// at one call at a time (the wake-ups, on a machine whose cores Redis and
// the gateway share), and at 64 calls at once doubled the 99th percentile
// of an admission through the middleware (BENCHMARKS.md, "Every first
// attempt inline"). It awaits its reply for inlineWaitFactor hedge delays
// (sixteen times the 99th percentile of recent answers), at least
// inlineWaitFloor, at most half the time the call has (go-redis, with
// ContextTimeoutEnabled, bounds the read by the attempt's deadline and
// then closes the connection, its late reply with it). done is false when
// that passed with no reply and time is left for hedged to send the call
// again, with its identity, as a hedge would (err is then the attempt's
// timeout), or when the call has too little time for an attempt inline
// (err is nil: none was made, and hedged makes the first).
//
// The attempt's context ends at its wait (internal/deadline: a timer
// shared with the calls ending in the same millisecond) or its caller's
// end, not only at its deadline: go-redis waits for a connection being dialed, and sleeps
// between retries of its own, until the context is done, whatever its
// deadline says. With the deadline alone, an attempt waiting on a dial
// whose handshake was lost, or on a retry's backoff, waited out the whole
// call, and the call failed unhedged (cmd/llmrate-spill, -scenarios
// silent,reset -fallback=false: 6 of 197 silenced calls and 9 of 99 reset
// ones failed open, with go-redis's retries off; none once it ended).
func (s *Store) inline(ctx context.Context, now time.Time, script *redis.Script, keys []string, args []any) (v any, err error, done bool) {
	left := timeLeftAt(ctx, now)
	d := min(max(inlineWaitFactor*s.hedge.delayLeft(left, s.timeout), inlineWaitFloor), left/2)
	if d < hedgeMinDelay {
		return nil, nil, false // too little time to wait and send again: hedged makes the first attempt
	}
	// Rounded down to the millisecond: waits of the same length share
	// their timer's slot (deadline rounds the end up to Grain). Within,
	// not Bound: the attempt ends at its caller's cancellation too.
	actx, r := deadline.Within(ctx, now, max(d.Truncate(deadline.Grain), hedgeMinDelay))
	v, err = s.attempt(actx, now, script, keys, args)
	r.Release()
	if err == nil || ctx.Err() != nil || !timedOut(err) && !lostReply(err) {
		return v, err, true
	}
	if now = time.Now(); timeLeftAt(ctx, now) < hedgeMinDelay {
		return v, err, true
	}
	// Sent again only on the terms of a hedge: not while the breaker is
	// open, nor when Redis has answered no call of this store within the
	// last WithTimeout (a Redis that answers no one), where the call fails
	// now instead of at its deadline.
	if s.open.Load() || !s.live(now) {
		return v, err, true
	}
	return nil, err, false
}

// timedOut reports whether err is a read or write that passed its
// deadline (go-redis returns the net error, or the context's).
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// connFree reports whether the client's pool can give a hedge a
// connection without waiting: an idle one, or room to dial one (known for
// a *redis.Client, whose PoolSize bounds its one pool; a cluster's or a
// ring's stats add up pools of their own, so there an idle connection
// somewhere is what counts). A hedge that would queue for a connection
// behind every other call decides nothing sooner, and only holds a turn
// the calls queued with it need.
func (s *Store) connFree() bool {
	st := s.c.PoolStats()
	if st == nil {
		return true
	}
	return st.IdleConns > 0 || s.poolSize > 0 && int(st.TotalConns) < s.poolSize
}

// timeLeftAt is how long ctx has, at now, before its deadline (a long
// time when it has none).
func timeLeftAt(ctx context.Context, now time.Time) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return dl.Sub(now)
	}
	return time.Hour
}

// attemptCtx is the context of a call's attempts: the call's (its values,
// and its end, at which an attempt still waiting for a connection gives
// up), but for its deadline, the call's plus WithTimeout. go-redis (with
// ContextTimeoutEnabled) sets a connection's read and write deadlines from
// it, and closes a connection whose deadline passed: an attempt that lost
// the race, or whose call gave up at its deadline, keeps its connection
// while its answer comes a little late, instead of closing it (and having
// the next call dial, under load, a new one). The call itself returns by
// its own deadline (hedged), and a silent connection is closed a timeout
// later.
type attemptCtx struct {
	context.Context
	deadline time.Time
}

func (c *attemptCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// launch starts one attempt of a call on a goroutine of its own, which
// sends its result on ch (buffered: it never blocks). On a client that
// does not end a call at its context's deadline, an attempt takes one of
// the maxGuarded slots, and none is started when none is free; a hedge
// only while at least half of them are free, so that hedges never take
// the slots first attempts need. A hedge's end releases its place in
// flight. counted: the attempt is counted in Hedges (a hedge, or a lone
// call's resend), and is taken off the count when it ends cancelled,
// never sent.
func (s *Store) launch(ctx context.Context, ch chan<- attemptResult, script *redis.Script, keys []string, args []any, hedge, counted bool) bool {
	if !s.direct {
		if hedge && len(s.slots) >= maxGuarded/2 {
			return false // the other half is kept for calls of their own
		}
		select {
		case s.slots <- struct{}{}:
		default:
			return false
		}
	}
	go func() {
		if !s.direct {
			defer func() { <-s.slots }()
		}
		if hedge {
			defer s.hedge.inFlight.Add(-1)
		}
		v, err := s.attempt(ctx, time.Now(), script, keys, args)
		if counted && errors.Is(err, context.Canceled) {
			// Its call returned (hedged cancels its attempts) or was
			// cancelled before go-redis sent it (still queued for a
			// connection, or dialing one): it was not sent again.
			s.hedges.Add(-1)
		}
		ch <- attemptResult{v, err}
	}()
	return true
}

// attempt sends an identified call, and sends it again on another
// connection while its reply is lost to a closed or reset connection and
// ctx allows (at most maxResends times); it records the latency of the
// answer. start is the time now.
func (s *Store) attempt(ctx context.Context, start time.Time, script *redis.Script, keys []string, args []any) (any, error) {
	for try := 0; ; try++ {
		v, err := script.Run(ctx, s.once, keys, args...).Result()
		// time.Since reads the monotonic clock alone, where time.Now
		// reads the wall clock too: the latency and the answer's time
		// need only the one.
		lat := time.Since(start)
		end := start.Add(lat)
		if err == nil {
			s.hedge.observe(lat, end)
			return v, nil
		}
		if try == maxResends || ctx.Err() != nil || !lostReply(err) {
			return nil, err
		}
		s.resends.Add(1)
		start = end
	}
}

// Hedges returns how many hedges the store sent: calls sent again on
// another connection because no answer had come within the hedge delay
// (see the package doc, Faults). Each carried its identities, so Redis
// answered the repeat with its first answer and applied nothing twice.
func (s *Store) Hedges() int64 { return s.hedges.Load() }

// Package redisstore is an llmrate.Store on Redis or Valkey, so that many
// gateway processes enforce one exact global limit.
//
// Each admission is one round trip: a Lua script (run by SHA, loaded on
// first use) checks and debits all four buckets all or nothing, on the
// Redis server's clock (TIME), so gateway hosts with skewed clocks cannot
// mint capacity. Admissions arriving while a call is in flight share the
// next call with WithBatching (opt-in). Each reconcile
// is one more round trip.
//
// Keys: a request's two entries (the key's buckets within its workspace, and
// the workspace's buckets; one entry, the latter, for a Solo request) are
// strings named
//
//	<prefix>:{<workspace hash>}:k:<key hash>
//	<prefix>:{<workspace hash>}:w
//
// and the entries of a model-limits entry's own buckets (AdmitRequest.Model
// not empty) are
//
//	<prefix>:{<workspace hash>}:m:<model hash>:k:<key hash>
//	<prefix>:{<workspace hash>}:m:<model hash>:w
//
// The {…} hash tag puts all of a workspace's entries in one Redis Cluster
// slot, so the script is cluster-safe. The hashes are keyed (HMAC-SHA256
// with WithHashKey's secret), so neither a raw API key nor a workspace name
// appears in Redis (a model name is not secret, but is hashed the same way,
// which keeps names short and of one shape).
// Every entry expires once time alone would have refilled it to full (plus a
// second), so Redis holds active buckets only; an entry a plain admission
// wrote on the server's clock lives up to 10 s longer, which lets the next
// admissions keep its expiry instead of setting a new one (half the
// server's cost of the write).
//
// Arithmetic is exact, in microseconds (Redis's TIME resolution), with the
// same results as the memory store's for clock readings on whole
// microseconds.
//
// # Leases
//
// With WithLeases(share), a busy key's next Redis call also takes a lease of
// up to share × the capacity of its buckets into the process, and
// admissions are then decided locally against it. Bound: N processes
// together never admit more than one exact limit would (leases are debited
// up front, and a bucket refills only up to its capacity less what is out on
// lease); a process holds at most one lease per bucket (one per key, and
// one per workspace shared by its keys), so the capacity held in other
// processes' unused leases is at most N × share × capacity per bucket, and
// comes back when a lease is idle (within a second) or its store is closed
// (Close waits for renewals in flight). An admission that finds a renewal
// of its leases in flight waits for it at most a hedge delay (see Faults);
// past that it is decided on Redis by a call of its own that takes no
// lease, instead of waiting out its deadline for a renewal whose reply is
// held or lost and going to the fallback. A process that dies loses its
// leases' unused parts when they expire, 3 s after they were taken; the
// buckets then refill as usual. One exception to the bound: a reconcile
// that leaves a bucket in debt reaches the reconciling process's leases at
// once (they go back to Redis with it, and a renewal in flight meanwhile
// is not used), but other processes' only when they next go to Redis: a
// process uses a lease for at most 100 ms after asking for it, so within
// 100 ms and a round trip, and meanwhile they may admit their leases'
// unused parts, at most (N − 1) × share × capacity more than one exact
// limit would (measured: TestLeasesDebtWindowMeasured). Leases are fenced:
// each grant is a record of its own (the holder and a generation), and a
// return, a renewal or a reconcile names the record it returns, so a late
// one never removes or credits a newer lease. Meanwhile a request that one
// exact limit would admit may be
// refused; its Retry-After is computed from the Redis level as without
// leases, so it counts neither that held capacity (which may come back
// sooner) nor the leases still out when it expires (a retry then may be
// refused again, for at most a lease's life). Leases are returned by a
// goroutine that Close stops.
//
// # Gauges and reservations
//
// An admission under a concurrency gauge (llmrate.Limits
// ConcurrentRequests) or with a bounded wait (llmrate.AdmitRequest
// MaxWait) runs a script of its own (admitx.lua), still one round trip;
// every other admission runs the script it ran before, at the same cost.
// A reservation is debited at once (the levels may go below zero) and its
// Decision.Wait is the exact time, rounded up to the microsecond, until
// the request fits every bucket; past MaxWait the request is refused, its
// RetryAfter counting the reservations ahead. Each gauge is a sorted set
//
//	<key entry>:c (a Solo request's one gauge: <workspace entry>:c)
//	<workspace entry>:c
//
// of the admission IDs holding a slot, scored by their expiry on the Redis
// server's clock (TIME, also under WithClock: a slot's life is real time).
// The script drops expired members, then checks the count against the
// figure after the four buckets, all or nothing: a request refused by any
// bucket or gauge takes nothing. The reconcile carrying the admission's ID
// removes it from both gauges in the same call (a resent one removes
// nothing more). This process refreshes the slots it holds every
// WithSlotTTL / 3 from a goroutine that Close stops; a slot whose holder
// died or lost Redis expires WithSlotTTL after its last refresh. With
// WithLeases such an admission bypasses the leases: it is decided in
// Redis against the levels the lease script keeps (capacity out on lease
// is not free), and its reconcile releases the slots in a call of its own.
// Measured with redis-server 7.0 under cachegrind (one hot key in a
// workspace of another name, an ID on every call, the difference between
// 2,000 and 4,000 operations), before the plain admission's script was
// rewritten (bench/redis-gauge-instructions.txt): an admission and its
// reconcile without either cost 285,278 instructions against 285,727
// before gauges; with a key and a workspace gauge, 404,684 (+42%); an
// admission with MaxWait that fits now, 158,228 against 142,729 without.
//
// # Windows
//
// Windows (llmrate.Limits Windows: a daily request quota, a provider's
// separate input and output tokens per minute) are enforced in the same
// round trip: an admission whose figures carry windows runs a script of
// its own (admitw.lua) that checks the four per-minute buckets, every
// window bucket and the gauges in one atomic step, all or nothing, in the
// order llmrate.Store lists, with reservations (MaxWait) as above; its
// reconcile (reconcilew.lua) applies each window bucket's charge
// (llmrate.ReconcileRequest WindowDelta) with the per-minute charge and
// the release of its slots in one call, at most once under its ID, and a
// repeated admission gets its first decision, window levels included (its
// identity record, <workspace entry>:x:<ID>, holds them).
// Every admission and reconcile without windows runs the script it ran
// before, unchanged. Each window bucket is an entry of its own, next to
// its scope's entry (same hash slot, keyed hashes only):
//
//	<key entry>:v<Per in ms><meter>        (meter: r, t, i or o)
//	<workspace entry>:v<Per in ms><meter>  (a Solo request's only set)
//
// so a bucket is (scope, Model, meter, Per): a changed Per is another
// entry. It holds its figure and refills the figure per Per in exact
// integer arithmetic (a daily 10^12 included), and it expires once time
// alone has refilled it, plus a second: never while it owes. A refused
// admission's Decision.Window names the window, and its RetryAfter, exact
// to the microsecond, is capped at 60 s, or at the window's Per when a
// longer window is what it waits for. Such an admission is never batched
// and bypasses the leases (WithLeases): it is decided in Redis against the
// levels the lease scripts keep, as a gauged one is, and its reconcile
// goes to Redis (a credit stops at the capacity less what is out on lease;
// before a debit this process's leases on its entries go back in the same
// call, as with any reconcile that debits Redis). The local fallback
// (WithFallbackLocal) decides it as the memory store does.
//
// Quotas (llmrate.QuotaStore: Unlimited figures, calendar and session
// windows, a plan's windows and gauges lent to a model entry's request)
// run scripts of their own, admitq.lua and reconcileq.lua, one round trip
// each. A calendar period is the server's (WithClock's clock when set):
// Lua has no zone data, so the store computes the periods around the
// server's time as its replies last told it and sends three (before, in
// force, next); each bucket keeps the [start, end) it recorded and moves
// on only once the server's clock has passed that end. Skew tolerated:
// less than one period (a calendar day: 23 h at least) between the
// server's clock and the store's idea of it; beyond, an admission that
// would start a period fails open (an error) and is counted (Skews). A
// request a calendar or session window has no room for is refused, never
// granted a reservation across the boundary. The notes in quota.go give
// the key names.
//
// # Priority reserves
//
// An admission with a priority reserve (llmrate.AdmitRequest.Reserve > 0,
// set by the limiter's WithPriority) runs admitw.lua too, windows or not,
// in one round trip: the floors of its four per-minute buckets (capacity
// twice the figure), of every window bucket (capacity its figure) and of
// its two gauges (the figure) are computed in Go, exactly
// (llmrate.ReserveFloor: ⌈Reserve × capacity / 10^6⌉ in 128-bit
// integers), and sent as one binary argument; each is at most its
// capacity, at most 2 × 10^12, so the script's doubles hold it exactly.
// The script admits only while every bucket holds its need plus its floor
// (an output meter: 1 plus its floor) and every gauge's count plus one
// plus its floor is within its figure, all or nothing. Refused names the
// first without that room in the usual order, with ByReserve when it had
// room for the request itself; RetryAfter is the exact wait until the
// request fits above the floor in every bucket (a gauge: 1 s), capped as
// for windows (60 s, or a longer window's Per; the limiter rounds it up
// to whole seconds), and a request larger than some bucket's capacity less
// its floor NeverFits. Such a request is never granted a reservation
// (MaxWait is ignored: one is debited at once, below the floor). A Reserve above llmrate.MaxReserve counts as
// MaxReserve. Such an admission is never batched and bypasses the leases
// (WithLeases): it is decided in Redis against the shared levels the lease
// scripts keep (capacity out on lease is not free), never from this
// process's lease. Its identity, resends and hedges are the windowed
// admission's (a repeat is answered with the first decision and debits
// nothing). Its reconcile is the reconcile its figures would have without
// a reserve (a reserve affects admission only), and the local fallback
// (WithFallbackLocal) gets the same request, reserve included. An
// admission without a reserve sends exactly what it sent before:
// admit.lua, batch.lua, lease.lua and admitx.lua are unchanged, and
// admitw.lua reads the floors only when they are sent. Measured with
// redis-server 7.0 under cachegrind (one hot key in a workspace of
// another name, an ID on every call, each admission with its reconcile,
// bench/redis-priority-instructions.txt): without a reserve the cost is
// unchanged (a plain admission and its reconcile 264,543 to 267,036
// before, 267,342 to 273,118 after, identical scripts: the spread is the
// measurement's); with a reserve of one half, a plain request costs
// 334,467 (+24%: the windowed script's keys, definitions and reply), one
// with a daily window 443,495 (+3%), with two gauges 435,765 (+7%).
//
// # Faults
//
// Every admission and reconcile the limiter sends has an identity
// (llmrate.AdmitRequest.ID): an admitted ID leaves a record next to its
// workspace entry for 5 s (its four levels, 32 bytes, under a name of
// about 60), and a reconcile's ID one for 30 s, so that a call whose reply
// was lost can be sent again: the store resends it itself, on another
// connection, when its connection closes or resets within the deadline
// (Resends counts these). go-redis never sends a script call of the
// store again itself, whatever the client's MaxRetries: its retries wait
// out a backoff the call's hedges need, and would run a call without an
// identity twice. A repeated admission is answered with its first
// decision and debits nothing again; a repeated reconcile is not applied
// again.
//
// A reply lost on a connection that stays open (a dead link, a stalled
// peer: nothing closes or resets, so nothing tells go-redis) is hedged: a
// call whose every admission and reconcile has an identity (releases,
// slot refreshes and lease returns, which apply at most once by
// themselves, too) and that is still unanswered after a few hedge delays
// (its first attempt's wait, below; then one delay between hedges) is
// sent again on another connection, carrying the same identities; the
// first answer wins and a later one is discarded, on every path (plain,
// batched, gauged, leased renewals). The delay is the 99th percentile of
// the latencies of the store's recent answered calls (over about the last
// 1,024 to 2,048 calls; a histogram of four buckets per power of two, so
// rounded up by at most a quarter), so that on a quiet network about 1% of
// the attempts made on goroutines hedge (a first attempt made inline,
// below, waits longer, and almost none does); it is at least 500 µs
// (less would save too little for the load it adds) and at most a
// quarter of the time the call has (WithTimeout, or its caller's
// deadline when nearer: 7.5 ms at the default 30 ms), so that up to
// three hedges, one a delay after the other, fit with time for a round
// trip; until the first 1,024 calls it is that quarter. Hedges are
// bounded per store: 16 in flight at most,
// and per window of 1,024 calls at most 16 plus 10% of the window's calls
// so far, so the extra load on Redis stays far below double. None is sent
// while the breaker is open, unless Redis answered some call of this
// store within the last WithTimeout or no failure has counted towards the
// breaker since its last success (so not on a store's first call, and not
// into a Redis that answers no one; but on a quiet store, whose last call
// succeeded however long ago, yes), or with less than a delay left. Hedges counts them. The hedge goes on
// another connection because the call it hedges holds its own (checked
// out of go-redis's pool until it ends), so the pool hands the hedge an
// idle one or dials one; and a hedge is sent only when the pool has an
// idle connection or room to dial one within its PoolSize, so it never
// queues for a turn, behind the silent connection or any other. On a
// client without ContextTimeoutEnabled a hedge takes one of the 256
// guarded slots (see Context) only while half of them are free.
// On a client with ContextTimeoutEnabled, once a delay is learned (after
// the store's first 1,024 calls), a call makes its first attempt
// on the caller's goroutine, without a goroutine, channel or timer of its
// own (handing a reply across goroutines cost about a fifth of the
// throughput of one caller, and at 64 callers doubled the tail). It waits
// sixteen hedge delays for its reply and at least 100 ms (calls may queue
// for the pool's connections within it, and a stall times them all out at
// once), at most half the time the call has (a nearer read deadline costs
// the runtime's timers and poller more CPU per call).
// Past that its connection is closed (go-redis closes a connection whose
// read deadline passed, its late reply with it) and the call is sent
// again, on a hedge's terms (not while the breaker is open, nor when Redis
// is not taken to be answering: the call then fails at once), which counts
// as its first hedge: a lone call's is not drawn from the hedges' budget
// below, since it replaces an attempt that has ended and is alone; with
// others in flight it is a hedge within the bounds, or the call fails (so
// a stall longer than that wait sends at most the bounds' worth again, and
// the rest to the fallback). From then on (and on other
// clients from the first attempt) each attempt runs on a goroutine of its
// own, and reads until its call's deadline plus
// WithTimeout: one that lost the race keeps its connection when its answer
// comes a little late (go-redis closes a connection whose
// deadline passed), and a silent connection is closed then. A hedge of an
// admission Redis refused the first time may be admitted when it runs:
// if the refusal's answer came first, that debit is spent on nothing
// (Redis admits less than exact, never more); a lease it granted expires
// unused. The records cost the server
// about 19,100 to 20,200 instructions per admission (a GET and a SET of a
// new key with its expiry), on a call of about 56,000 to 57,000 without
// them (+34–36%, two runs:
// redis-server 7.0 under cachegrind, one hot key, one admission per call,
// bench/redis-script-cost.txt).
//
// A reconcile goes to the store that decided its admission (its Receipt):
// the local fallback's decisions to the fallback, Redis's to Redis, even
// while Redis is down (it then fails, and the limiter retries it for 5 s).
//
// Three failed calls in a row open a breaker (a call counts in the row
// only when it was sent after the last one counted failed: the calls that
// one stall times out together are one failure, not a row of them, so a
// stall shorter than a few timeouts does not hand every admission to the
// fallback for a retry interval): Redis is then not called,
// but for one probe at a time every WithRetryInterval (100 ms), and the
// first success closes it; meanwhile admissions go to the fallback
// (WithFallbackLocal), or fail, but for those this process's lease covers
// (WithLeases), which the lease still decides. A deadline passing is a failure; a caller's
// cancellation is not, on any path.
//
// # Context
//
// Every call returns by its context's deadline and WithTimeout, whatever
// the client: go-redis ends a call there only on a client built with
// ContextTimeoutEnabled (prefer one: docs/redis.md's example does); on any
// other, each call runs on a goroutine of its own (at most 256 in flight)
// that the store stops waiting for at the deadline. HonoursContext is
// true either way, and the limiter calls the store directly.
//
// The guide, with the behaviour under faults and the leases' bounds, is
// docs/redis.md at the root of this module.
package redisstore

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/deadline"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// The scripts. Those that share code with others (the refusal cascade,
// the debit, the waits, a reconcile's arguments and its bound with
// leases) are generated from luasrc/, their shared parts in
// luasrc/parts/ (see internal/luagen): edit those and run go generate;
// TestScriptsAreGenerated fails on a script that differs from its source.
// The generated admit.lua is written out whole, functions inlined, for
// what the server spends on it.
//
//go:generate go run ../internal/luagen/cmd/luagen

var (
	//go:embed arith.lua
	arithLua string
	//go:embed entry.lua
	entryLua string
	//go:embed admitone.lua
	admitOneLua string
	//go:embed admit.lua
	admitLua string
	//go:embed reconcile.lua
	reconcileLua string

	admitScript     = redis.NewScript(admitLua)
	reconcileScript = redis.NewScript(arithLua + entryLua + ridLua + reconcileLua)
)

// Defaults.
const (
	DefaultPrefix        = "llmrate"
	DefaultTimeout       = 30 * time.Millisecond
	DefaultRetryInterval = 100 * time.Millisecond
)

// MinHashKeyLen is the shortest secret WithHashKey accepts.
const MinHashKeyLen = 16

// Store is an llmrate.Store on Redis. It is safe for concurrent use.
type Store struct {
	c        redis.UniversalClient
	once     onceScripter // c, each script call sent once (once.go)
	prefix   string
	hashKey  []byte
	clock    func() time.Time
	timeout  time.Duration
	retry    time.Duration
	fallback *llmrate.MemoryStore
	batch    *batcher  // nil: one call per admission (batch size 1)
	leases   *leaser   // nil: no leases
	gauges   *holder   // the slots this process holds
	macs     sync.Pool // of *mac

	direct bool          // the client ends a call at its context's deadline
	slots  chan struct{} // guarded calls in flight, when not direct

	// The breaker: open after breakAfter failed calls in a row; while open,
	// one call (a probe) may go to Redis from probeAt on, and the first
	// success closes it. A failed call counts in the row only when it was
	// sent after the last one counted failed (failedAt): calls in flight
	// together that one stall times out are one failure, not many.
	open        atomic.Bool
	probeAt     atomic.Int64 // mono ns
	consecutive atomic.Int64 // failed calls in a row
	failedAt    atomic.Int64 // mono ns: when the last failure counted in the row was seen
	errors      atomic.Int64
	resends     atomic.Int64
	hedges      atomic.Int64
	opens       atomic.Int64 // times the breaker opened
	openedAt    atomic.Int64 // mono ns: when it last opened
	fallbacks   atomic.Int64 // admissions the local fallback decided
	log         *zap.Logger  // WithLogger: the breaker's transitions
	hedge       hedger       // the hedge delay and bounds (hedge.go)
	poolSize    int          // a *redis.Client's PoolSize (0: another client)

	seen seenRecord // with leases, recent reconciles' identities (lease.go)

	charges chargeBook // the fallback's admissions to charge to Redis (charges.go)
	quota   quotaState // the server's time as last seen, the calendar caches (quota.go)
}

// breakAfter is how many failed calls in a row open the breaker: one slow
// call under load is not an outage.
const breakAfter = 3

// maxResends is how many times one call is sent again after its reply was
// lost (its connection closed or reset), within its deadline, when every
// admission or reconcile it carries has an identity: Redis answers a
// repeat with its first answer, so resending is safe while time is left.
// A resend goes on a new connection, whose handshake (HELLO, CLIENT) may
// lose its replies too: under heavy loss most tries fail, so the cap is
// high, and the deadline (WithTimeout) is what ends a call. The cap only
// stops a call from spinning through connections that all fail at once.
const maxResends = 32

// maxGuarded bounds the calls in flight on a client that does not end a
// call at its context's deadline (see HonoursContext): each runs on a
// goroutine of its own, which outlives a call abandoned at its deadline
// until the client's read timeout. Past the bound a call fails at once.
const maxGuarded = 256

// Identity records' lives (AdmitRequest.ID, ReconcileRequest.ID): an
// admission is resent within its deadline, so its record lives a few
// seconds; a reconcile is retried by the limiter for about five seconds,
// so its record lives thirty.
const (
	admitIDLife     = 5 * time.Second
	reconcileIDLife = 30 * time.Second
)

// receiptLocal is the Decision.Receipt of an admission the local fallback
// decided (WithFallbackLocal): its reconcile goes to the fallback too. A
// Redis decision's receipt is "".
const receiptLocal = "local"

var (
	_ llmrate.Store            = (*Store)(nil)
	_ llmrate.EvictionNotifier = (*Store)(nil)
	_ llmrate.StoreStats       = (*Store)(nil)
)

// Option configures a Store. Options only record values; New validates
// them once and reports every invalid one.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is what the options record.
type config struct {
	prefix      string
	hashKey     []byte
	hashKeySet  bool
	clock       func() time.Time
	clockSet    bool
	timeout     time.Duration
	retry       time.Duration
	fallback    *llmrate.MemoryStore
	batch       int
	batchSet    bool
	leases      float64
	leasesSet   bool
	slotTTL     time.Duration
	slotTTLSet  bool
	nilOptions  int
	fallbackSet bool
	logger      *zap.Logger
}

// WithPrefix sets the prefix of every key name. Default: DefaultPrefix. It
// must not be empty or contain '{' or '}'.
func WithPrefix(p string) Option {
	return optionFunc(func(c *config) { c.prefix = p })
}

// WithHashKey sets the secret that keys the name hashes: at least
// MinHashKeyLen bytes, from a secret store or a random source, never a
// constant in code. It is required (there is no default): with a public
// key, anyone who can read Redis could test guessed API keys against the
// names. Every gateway sharing the limits must use the same one; changing
// it starts every bucket afresh (full).
func WithHashKey(secret []byte) Option {
	return optionFunc(func(c *config) { c.hashKey, c.hashKeySet = append([]byte(nil), secret...), true })
}

// WithClock makes the scripts use this clock instead of the Redis server's
// TIME (for tests: all processes must then share it). Readings are used at
// microsecond resolution. nil is an error.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.clock, c.clockSet = now, true })
}

// WithTimeout bounds each Redis call. Default: DefaultTimeout. Keep it below
// the limiter's store timeout (llmrate.WithStoreTimeout, 50 ms by default)
// so that WithFallbackLocal can answer in time. d must be positive. Under
// the limiter, a call's deadline is d rounded up to the next millisecond
// (the calls ending in the same millisecond share one timer); the limiter's
// own deadline serves when it is no later.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// WithRetryInterval sets how often the store probes Redis while its
// breaker is open. Three failed calls in a row (each sent after the one
// before failed) open the breaker: Redis is
// then not called, admissions go to the local fallback (WithFallbackLocal)
// or fail (but for those a lease covers, with WithLeases), so that an outage does not add the timeout to every request;
// but once per interval one call (a probe) goes to Redis, one at a time,
// and the first that succeeds closes the breaker. Default:
// DefaultRetryInterval (100 ms). d must not be negative.
func WithRetryInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.retry = d })
}

// WithLogger sets the logger of the store's breaker: its opening (Redis
// stopped answering: admissions go to the local fallback, or fail open)
// and its closing (Redis answers again), each logged once, at warn, when
// it happens, never per call. If nil or unset, nothing is logged. The
// lines carry no key: "redisstore: breaker open" with the error that
// opened it, whether a fallback answers (fallback) and the retry interval;
// "redisstore: breaker closed" with how long it was open (open_for) and
// the admissions the fallback decided in all (fallbacks).
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithFallbackLocal enforces per-process in-memory buckets while Redis is
// unreachable, instead of returning the error (which makes the limiter fail
// open and pass everything). Limits are then per process until Redis is
// back. The fallback follows Redis: each decision Redis makes on an
// admission lowers the fallback's per-minute buckets for that key to the
// levels Redis reported (llmrate.MemoryStore.Follow), so a call that fails
// is decided from what Redis last said, refilled since, not from full
// buckets; a key Redis never decided for starts full, and windows
// (llmrate.Limits.Windows) and concurrency limits are not followed (the
// fallback holds its own). The fallback so tracks each key Redis decides
// for, up to its WithMaxKeys bound; those copies make room first, and
// their going is no eviction. The fallback's lossy evictions (of what it
// spent itself) reach the observers of the limiters using the store
// (NotifyEvictions).
//
// Each admission the fallback allows is charged to Redis once Redis
// answers again, in the background: one request and the tokens it
// consumed (its reconcile folded in when it came first), in every
// per-minute bucket and window it spends, debited whatever the levels (a
// bucket may go into debt), so that the processes sharing the buckets do
// not spend it too; its reconcile then goes to Redis as well. One Redis
// had allowed itself, its reply lost, is found by its identity record and
// not charged twice (within 5 s; a charge sent later is charged whatever
// Redis did). Admissions without an ID are not charged. See Charges. An
// invalid memory option makes New fail.
func WithFallbackLocal(opts ...llmrate.MemoryOption) Option {
	return optionFunc(func(c *config) { c.fallback, c.fallbackSet = llmrate.NewMemoryStore(opts...), true })
}

// New returns a Store on client (a *redis.Client, *redis.ClusterClient or
// Sentinel-backed client). WithHashKey is required. Invalid options are
// reported together (errors.Join), each as a *llmrate.ConfigError whose
// Option is qualified, e.g. "redisstore.WithHashKey".
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	c := config{prefix: DefaultPrefix, timeout: DefaultTimeout, retry: DefaultRetryInterval, slotTTL: DefaultSlotTTL}
	for _, o := range opts {
		if o == nil {
			c.nilOptions++
			continue
		}
		o.apply(&c)
	}
	if err := c.check(client); err != nil {
		return nil, err
	}
	s := &Store{c: client, once: onceScripter{client}, prefix: c.prefix, hashKey: c.hashKey, clock: c.clock, timeout: c.timeout, retry: c.retry, fallback: c.fallback, log: c.logger}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.gauges = newHolder(c.slotTTL)
	s.direct = clientHonoursContext(client)
	if rc, ok := client.(*redis.Client); ok {
		s.poolSize = rc.Options().PoolSize
	}
	if !s.direct {
		s.slots = make(chan struct{}, maxGuarded)
		s.log.Warn("redisstore: the client lacks ContextTimeoutEnabled: each call runs on a goroutine of its own, and a reply lost on a connection that stays open holds that connection until the client's ReadTimeout; build the client with ContextTimeoutEnabled: true")
	}
	s.macs.New = func() any { return &mac{h: hmac.New(sha256.New, s.hashKey)} }
	if c.leasesSet {
		id := make([]byte, 8)
		_, _ = rand.Read(id) // never fails (crypto/rand)
		s.leases = &leaser{share: c.leases, id: hex.EncodeToString(id), held: map[string]*group{}, stop: make(chan struct{})}
	}
	if n := c.batchSize(); n >= 2 {
		s.batch = &batcher{max: n}
	}
	return s, nil
}

// check reports every invalid option in c, for a store on client, each as
// a *llmrate.ConfigError (a nil client as a plain error), joined.
func (c *config) check(client redis.UniversalClient) error {
	var errs []error
	fail := func(option, format string, args ...any) {
		errs = append(errs, &llmrate.ConfigError{Option: "redisstore." + option, Err: fmt.Errorf(format, args...)})
	}
	if client == nil {
		errs = append(errs, errors.New("redisstore: nil client"))
	}
	if c.nilOptions > 0 {
		fail("Option", "nil option")
	}
	if c.prefix == "" || strings.ContainsAny(c.prefix, "{}") {
		fail("WithPrefix", "%q: want a non-empty prefix without '{' or '}'", c.prefix)
	}
	switch {
	case !c.hashKeySet:
		fail("WithHashKey", "required: a secret of at least %d bytes keys the names in Redis (there is no default)", MinHashKeyLen)
	case len(c.hashKey) < MinHashKeyLen:
		fail("WithHashKey", "%d bytes: want at least %d", len(c.hashKey), MinHashKeyLen)
	}
	if c.clockSet && c.clock == nil {
		fail("WithClock", "nil clock")
	}
	if c.timeout <= 0 {
		fail("WithTimeout", "%v: must be positive", c.timeout)
	}
	if c.slotTTLSet && c.slotTTL <= 0 {
		fail("WithSlotTTL", "%v: must be positive", c.slotTTL)
	}
	if c.retry < 0 {
		fail("WithRetryInterval", "%v: must not be negative", c.retry)
	}
	if c.fallbackSet {
		if err := c.fallback.Err(); err != nil {
			errs = append(errs, &llmrate.ConfigError{Option: "redisstore.WithFallbackLocal", Err: err})
		}
	}
	if c.leasesSet && !(c.leases > 0 && c.leases <= 0.25) {
		fail("WithLeases", "lease share %v, want 0 < share <= 0.25", c.leases)
	}
	if c.leasesSet && c.batchSet && c.batch >= 2 {
		fail("WithLeases", "WithLeases and WithBatching cannot be combined")
	}
	if c.batchSet {
		if c.batch < 1 {
			fail("WithBatching", "batch size %d, want at least 1 (1: one admission per call)", c.batch)
		}
		if _, ok := client.(*redis.Client); !ok && client != nil && c.batch >= 2 {
			fail("WithBatching", "batching needs a single-node or Sentinel client (*redis.Client), not %T (a batch could span hash slots or shards)", client)
		}
	}
	return errors.Join(errs...)
}

// batchSize is the most admissions per script call: WithBatching's, else
// 1 (batching is opt-in).
func (c *config) batchSize() int {
	if c.batchSet {
		return c.batch
	}
	return 1
}

// NotifyEvictions implements llmrate.EvictionNotifier: the local fallback's
// lossy evictions (WithFallbackLocal) reach o. Redis itself evicts nothing
// before it is full. Without a fallback, stop does nothing.
func (s *Store) NotifyEvictions(o llmrate.Observer) (stop func()) {
	if s.fallback == nil {
		return func() {}
	}
	return s.fallback.NotifyEvictions(o)
}

// Errors returns how many Redis calls failed, a deadline passing before
// Redis answered included (the limiter's store timeout, when shorter than
// the store's, is such a deadline: Redis did not answer in the time
// allowed). A call its caller cancelled is not counted (nor towards the
// breaker's three in a row: see WithRetryInterval), on any path: the caller
// gave up, Redis did not fail. Nor is a call whose reply was lost and that
// was answered when sent again (see Resends).
func (s *Store) Errors() int64 { return s.errors.Load() }

// Keys returns the Redis key names of the two entries of (key, workspace)
// that hold the default buckets. It is shorthand for
// ModelKeys(key, workspace, "").
func (s *Store) Keys(key, workspace string) (keyEntry, workspaceEntry string) {
	return s.ModelKeys(key, workspace, "")
}

// ModelKeys returns the Redis key names of the two entries of (key,
// workspace) that hold the buckets of model, a ModelLimits entry's name as
// configured ("" for the default buckets).
func (s *Store) ModelKeys(key, workspace, model string) (keyEntry, workspaceEntry string) {
	return s.names(key, workspace, model, false)
}

// names returns ModelKeys(key, workspace, model); for a solo request, whose
// buckets are kept once, in the workspace's entry, it returns that entry's
// name twice and does not hash the key (the scripts leave a solo request's
// key entry alone).
func (s *Store) names(key, workspace, model string, solo bool) (keyEntry, workspaceEntry string) {
	m := s.macs.Get().(*mac)
	defer s.macs.Put(m)
	b := s.appendEntryPrefix(m, m.name[:0], workspace, model)
	n := len(b)
	b = append(b, 'w')
	workspaceEntry = string(b)
	if solo {
		m.name = b
		return workspaceEntry, workspaceEntry
	}
	b = m.appendHash(append(b[:n], "k:"...), 'k', key)
	m.name = b
	return string(b), workspaceEntry
}

// appendEntryPrefix appends to b what the names of workspace's entries
// (for model, its model entries) begin with: the store's prefix, the
// workspace's hash tag, and the model's hash. The workspace's entry adds
// "w", a key's "k:" and the key's hash.
func (s *Store) appendEntryPrefix(m *mac, b []byte, workspace, model string) []byte {
	b = append(b, s.prefix...)
	b = append(b, ":{"...)
	b = m.appendHash(b, 'w', workspace)
	b = append(b, "}:"...)
	if model != "" {
		b = append(b, "m:"...)
		b = m.appendHash(b, 'm', model)
		b = append(b, ':')
	}
	return b
}

// mac is a reusable HMAC state keyed with the store's secret, with scratch
// space: once reset, a state restarts from its precomputed pads, so a name
// costs two SHA-256 blocks and no allocation but the name's own.
type mac struct {
	h    hash.Hash
	msg  []byte
	sum  [sha256.Size]byte
	name []byte
}

// appendHash appends to dst the hash of tag, 0, v: the first 12 bytes of
// its HMAC-SHA256, in hex.
func (m *mac) appendHash(dst []byte, tag byte, v string) []byte {
	m.h.Reset()
	m.msg = append(append(m.msg[:0], tag, 0), v...)
	m.h.Write(m.msg)
	return hex.AppendEncode(dst, m.h.Sum(m.sum[:0])[:12])
}

func (s *Store) nowArg() string {
	if s.clock == nil {
		return ""
	}
	return strconv.FormatInt(s.clock().UnixMicro(), 10)
}

// bound returns ctx bounded by the store's timeout, and what releases it
// once the call is done: ctx itself when its deadline is already that
// near (the limiter's store timeout, when it is not longer than this
// one); under the limiter (whose store-call context has no cancellation
// but its deadline's, and its retirement once its holders let go), a
// context sharing its end with the calls ending in the same millisecond,
// with no timer of its own (internal/deadline: the deadline rounded up by
// at most a millisecond), or the limiter's own when that ends no later;
// otherwise context.WithTimeout's.
func (s *Store) bound(ctx context.Context, now time.Time) (context.Context, deadline.Releaser) {
	return deadline.Within(ctx, now, s.timeout)
}

// up reports whether Redis should be tried now by a caller whose context
// is ctx: always while the breaker is closed; while it is open, for one
// caller (the probe) once the retry interval has passed since the last
// failure, and then for no other until that probe has had its time (the
// store's timeout, or its caller's deadline when nearer: so one probe at a
// time) or failed. A caller whose context is done is never the probe.
func (s *Store) up(ctx context.Context) bool {
	if !s.open.Load() {
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	now := time.Now()
	at := s.probeAt.Load()
	if mono(now) < at {
		return false
	}
	hold := s.timeout
	if d, ok := ctx.Deadline(); ok && d.Sub(now) < hold {
		hold = d.Sub(now)
	}
	return s.probeAt.CompareAndSwap(at, mono(now.Add(s.retry+hold)))
}

// monoStart is the origin of mono.
var monoStart = time.Now()

// mono returns t as nanoseconds since monoStart on the monotonic clock
// (when t has a monotonic reading, as time.Now's do): the breaker's and
// the hedger's times are compared in it, so that a wall clock stepped
// back (an NTP step, a VM resumed) neither keeps the breaker shut nor
// delays its probes.
func mono(t time.Time) int64 { return int64(t.Sub(monoStart)) }

func (s *Store) failed(err error) error {
	return s.failedSince(err, time.Time{})
}

// failedSince is failed for a call sent at sent: it counts towards the
// breaker's row only when sent after the last failure counted (a zero
// sent always counts), so that one stall, which times out every call in
// flight at once, is one failure in the row; three calls that fail one
// after another, each sent after the one before failed, open it.
func (s *Store) failedSince(err error, sent time.Time) error {
	s.errors.Add(1)
	now := time.Now()
	last := s.failedAt.Load()
	counts := sent.IsZero()
	if counts {
		s.failedAt.Store(mono(now))
	} else if mono(sent) >= last {
		// Of the failures of calls sent after the last one counted, the
		// first to get here counts: the calls of one stall that all read
		// the same last count once.
		counts = s.failedAt.CompareAndSwap(last, mono(now))
	}
	if counts && s.consecutive.Add(1) >= breakAfter && !s.open.Load() {
		s.probeAt.Store(mono(now.Add(s.retry)))
		if s.open.CompareAndSwap(false, true) {
			s.opened(err, now)
		}
	}
	if s.open.Load() {
		s.probeAt.Store(mono(now.Add(s.retry)))
	}
	return fmt.Errorf("redisstore: %w", err)
}

func (s *Store) succeeded() {
	s.kickCharges()
	if s.consecutive.Load() != 0 {
		s.consecutive.Store(0)
	}
	if s.open.Load() && s.open.CompareAndSwap(true, false) {
		s.closed()
	}
}

// opened counts and logs the breaker's opening, by err, at now: once per
// opening (the caller won the transition).
func (s *Store) opened(err error, now time.Time) {
	s.opens.Add(1)
	s.openedAt.Store(mono(now))
	if ce := s.log.Check(zap.WarnLevel, "redisstore: breaker open"); ce != nil {
		ce.Write(zap.Error(err), zap.Bool("fallback", s.fallback != nil), zap.Duration("retry_interval", s.retry))
	}
}

// closed logs the breaker's closing: once per closing.
func (s *Store) closed() {
	if ce := s.log.Check(zap.WarnLevel, "redisstore: breaker closed"); ce != nil {
		open := time.Duration(mono(time.Now()) - s.openedAt.Load())
		ce.Write(zap.Duration("open_for", open), zap.Int64("fallbacks", s.fallbacks.Load()))
	}
}

// StoreStats implements llmrate.StoreStats: Errors, the breaker, the
// admissions the local fallback decided, Hedges, Resends and Charges, in
// one struct (otelrate reports them as metrics).
func (s *Store) StoreStats() llmrate.StoreCounters {
	sent, lost := s.Charges()
	return llmrate.StoreCounters{
		Errors:         s.errors.Load(),
		BreakerOpen:    s.open.Load(),
		BreakerOpens:   s.opens.Load(),
		Fallbacks:      s.fallbacks.Load(),
		Hedges:         s.hedges.Load(),
		Resends:        s.resends.Load(),
		ChargesPending: s.charges.queued.Load(),
		ChargesSent:    sent,
		ChargesLost:    lost,
	}
}

// Resends returns how many calls were sent again because their reply was
// lost (their connection closed or reset): each carried identities, so
// Redis answered a repeat with its first answer.
func (s *Store) Resends() int64 { return s.resends.Load() }

var (
	errDown  = errors.New("redisstore: redis unavailable, retrying later")
	errBusy  = errors.New("redisstore: too many calls in flight on a client without ContextTimeoutEnabled")
	errNoFbk = errors.New("redisstore: a reconcile with the local fallback's receipt, but the store has no fallback")
)

// run runs script once against Redis, bounded by the store's timeout and
// ctx's deadline whatever the client (see HonoursContext), and returns its
// result. When resend is set (every admission or reconcile in the call has
// an identity), the call is hedged (hedge.go): sent again on another
// connection when no answer came within the hedge delay, the first answer
// winning; and an attempt whose reply was lost to a closed or reset
// connection is sent again at once, while time is left. A failure is
// counted (Errors, and towards the breaker) unless ctx was cancelled: a
// deadline passing is a failure, a caller giving up is not, nor a context
// done before anything was sent.
func (s *Store) run(ctx context.Context, script *redis.Script, keys []string, args []any, resend bool) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	sent := time.Now()
	cctx, r := s.bound(ctx, sent)
	defer r.Release()
	var v any
	var err error
	if resend {
		v, err = s.hedged(cctx, sent, script, keys, args)
	} else {
		v, err = s.eval(cctx, script, keys, args)
	}
	if err != nil {
		if errors.Is(cctx.Err(), context.Canceled) {
			// The caller gave up (go-redis ends a call at its context's
			// deadline, not at its cancellation).
			return nil, fmt.Errorf("redisstore: %w: %w", ctx.Err(), err)
		}
		return nil, s.failedSince(err, sent)
	}
	s.succeeded()
	return v, nil
}

// eval runs script once, returning by ctx's deadline even on a client that
// does not (on a goroutine of its own, at most maxGuarded at a time).
func (s *Store) eval(ctx context.Context, script *redis.Script, keys []string, args []any) (any, error) {
	if s.direct {
		return script.Run(ctx, s.once, keys, args...).Result()
	}
	select {
	case s.slots <- struct{}{}:
	default:
		return nil, errBusy
	}
	type result struct {
		v   any
		err error
	}
	ch := make(chan result, 1)
	go func() {
		defer func() { <-s.slots }()
		v, err := script.Run(ctx, s.once, keys, args...).Result()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// lostReply reports whether err means the call's connection closed or
// reset: its reply, if Redis ran it, is lost, and an identified call may
// be sent again. (A connection that could not be made is no lost reply:
// go-redis retries dials itself.)
func lostReply(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// int64s converts a script's reply of n integers.
func int64s(v any, n int) ([]int64, error) {
	vs, ok := v.([]any)
	if !ok || len(vs) != n {
		return nil, fmt.Errorf("redisstore: script returned %T of %d values, want %d integers", v, len(vs), n)
	}
	out := make([]int64, n)
	for i, x := range vs {
		if out[i], ok = x.(int64); !ok {
			return nil, fmt.Errorf("redisstore: script returned %T at %d, want an integer", x, i)
		}
	}
	return out, nil
}

// Admit implements llmrate.Store in one round trip (more when its reply is
// lost and it has an ID: it is sent again while WithTimeout allows; see
// llmrate.AdmitRequest.ID).
func (s *Store) Admit(ctx context.Context, r llmrate.AdmitRequest) (llmrate.Decision, error) {
	if quotaAdmit(&r) {
		// Unlimited figures, calendar or session windows, a plan's windows
		// or gauges lent: admitq.lua (quota.go).
		return s.admitQ(ctx, r, false)
	}
	if admitsW(&r) {
		// Windows, and a priority reserve (floors in every bucket and
		// gauge): admitw.lua, never batched nor decided on a lease.
		return s.admitW(ctx, r) // window.go
	}
	if g := gauged(r.KeyLimits, r.WorkspaceLimits); g || r.MaxWait > 0 {
		if g && r.ID == "" {
			return llmrate.Decision{}, llmrate.ErrNoAdmissionID
		}
		if !s.up(ctx) {
			return s.admitLocal(ctx, r, errDown)
		}
		return s.admitX(ctx, r)
	}
	if s.leases != nil {
		// A lease is debited in Redis already: it decides without Redis,
		// breaker open or not; admitLeased asks the breaker only before it
		// calls Redis.
		return s.admitLeased(ctx, r)
	}
	if !s.up(ctx) {
		return s.admitLocal(ctx, r, errDown)
	}
	if s.batch != nil {
		return s.admitBatched(ctx, r)
	}
	keys, args := s.admitCall(&r)
	v, err := s.run(ctx, admitScript, keys, args, r.ID != "")
	if err != nil {
		return s.admitLocal(ctx, r, err)
	}
	var res [8]int64
	if err := admitReply(v, res[:]); err != nil {
		return s.admitLocal(ctx, r, s.failed(err))
	}
	d := decisionFrom(res[:])
	s.follow(&r, &d)
	return d, nil
}

// admitCall returns admit.lua's keys and arguments for r: its entries'
// names (names: the workspace's, then the key's unless solo), its identity
// record's (idKey) and its one argument (admitArg, then the time and the
// record's life), built as one string, of which each is a part.
func (s *Store) admitCall(r *llmrate.AdmitRequest) (keys []string, args []any) {
	m := s.macs.Get().(*mac)
	defer s.macs.Put(m)
	b := s.appendEntryPrefix(m, m.name[:0], r.Workspace, r.Model)
	base := len(b)
	b = append(b, 'w')
	wEnd, idEnd := len(b), 0
	if r.ID != "" {
		b = append(append(b, ":a:"...), r.ID...) // idKey(workspace entry, 'a', ID)
		idEnd = len(b)
	}
	kStart := len(b)
	if !r.Solo { // solo: the key's entry is the workspace's, not named
		b = m.appendHash(append(append(b, b[:base]...), "k:"...), 'k', r.Key)
	}
	argAt := len(b)
	b = appendAloneArg(b, r, s.clock)
	m.name = b
	all := string(b)
	keys = make([]string, 1, 3)
	keys[0] = all[:wEnd]
	if !r.Solo {
		keys = append(keys, all[kStart:argAt])
	}
	if idEnd > 0 {
		keys = append(keys, all[:idEnd])
	}
	return keys, []any{all[argAt:]}
}

// admitLocal decides r in the local fallback (its Decision.Receipt says
// so, and its reconcile goes there too), or returns err without one.
func (s *Store) admitLocal(ctx context.Context, r llmrate.AdmitRequest, err error) (llmrate.Decision, error) {
	if s.fallback == nil {
		return llmrate.Decision{}, err
	}
	s.fallbacks.Add(1)
	d, ferr := s.fallback.Admit(ctx, r)
	d.Receipt = receiptLocal
	if ferr == nil && d.Allowed {
		// Charged to Redis when it answers (charges.go); with the breaker
		// open it was never sent there.
		s.noteCharge(r, errors.Is(err, errDown))
	}
	return d, ferr
}

// follow lowers the local fallback's buckets for r to the levels Redis
// reported in d (llmrate.MemoryStore.Follow): when a later call fails, the
// fallback decides from what Redis last said, refilled since, rather than
// from full buckets, and does not admit what the shared buckets had spent.
// Every decision Redis makes on an admission, allowed or refused, passes
// here; decisions a lease makes locally do not (Redis did not see them).
func (s *Store) follow(r *llmrate.AdmitRequest, d *llmrate.Decision) {
	if s.fallback != nil {
		s.fallback.Follow(*r, *d)
	}
}

// idKey is the name of the identity record of an admission (kind 'a'; 'x'
// for a windowed one, window.go), a reconcile (kind 'r') or a fallback
// admission's charge (kind 'c', charges.go) with identity
// id, next to its workspace entry w (same hash slot).
func idKey(w string, kind byte, id string) string {
	return w + ":" + string(kind) + ":" + id
}

// Reconcile implements llmrate.Store in one round trip. It goes where its
// admission was decided (r.Receipt): to the local fallback for the
// fallback's decisions, else to Redis, never the other, whatever the
// breaker did in between; while Redis is unreachable it fails (the limiter
// retries it). With an ID it is applied at most once, however often it is
// sent (by the caller, or by the client's own retries).
func (s *Store) Reconcile(ctx context.Context, r llmrate.ReconcileRequest) error {
	if r.Receipt == receiptLocal {
		if s.fallback == nil {
			return errNoFbk
		}
		if err := s.fallback.Reconcile(ctx, r); err != nil {
			return err
		}
		return s.chargeReconcile(ctx, r) // charges.go
	}
	return s.reconcileRedis(ctx, r, false)
}

// reconcileRedis applies r in Redis; with charge set, r is a fallback
// admission's charge (charges.go: its Estimate 0, its actuals the whole
// charge, one request more debited), under an identity record of its own
// (kind 'c'), so that the admission's reconcile can still follow it.
func (s *Store) reconcileRedis(ctx context.Context, r llmrate.ReconcileRequest, charge bool) error {
	quota := quotaReconcile(&r)
	release := !charge && r.ID != "" && (gaugedReceipt(r.Receipt) || gauged(r.KeyLimits, r.WorkspaceLimits) ||
		quota && gauged(planOf(r.KeyPlan), planOf(r.WorkspacePlan)))
	if release {
		// This process stops refreshing the slots at the first attempt,
		// applied or not: if no attempt lands, they expire a slot life
		// later instead of being held as long as the process lives.
		s.gauges.unhold(r.ID)
	}
	if !s.up(ctx) {
		return errDown
	}
	var err error
	switch {
	case quota:
		err = s.reconcileQ(ctx, r, release, charge) // quota.go
	case windowed(r.KeyLimits, r.WorkspaceLimits):
		err = s.reconcileW(ctx, r, release, charge) // window.go
	case release:
		err = s.reconcileGauged(ctx, r)
	case s.leases != nil:
		err = s.reconcileLeased(ctx, r, charge)
	default:
		k, w := s.names(r.Key, r.Workspace, r.Model, r.Solo)
		keys := []string{k, w}
		if r.ID != "" {
			keys = append(keys, idKey(w, reconcileKind(charge), r.ID))
		}
		_, err = s.run(ctx, reconcileScript, keys, reconcileArgs(s.nowArg(), r, charge), r.ID != "")
	}
	return err
}

// reconcileKind is the kind of a reconcile's identity record: 'r', or 'c'
// for a fallback admission's charge.
func reconcileKind(charge bool) byte {
	if charge {
		return 'c'
	}
	return 'r'
}

// reconcileArgs are reconcile.lua's arguments (a charge's, reconcileargs.lua,
// when charge is set).
func reconcileArgs(now string, r llmrate.ReconcileRequest, charge bool) []any {
	mode, life := soloArg(r.Refund), reconcileIDLife
	if charge {
		mode, life = "c", chargeLife
	}
	return []any{now, r.Estimate,
		r.BoundedActual(llmrate.KeyTokens), r.BoundedActual(llmrate.WorkspaceTokens),
		r.KeyLimits.RequestsPerMinute, r.KeyLimits.TokensPerMinute,
		r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute, soloArg(r.Solo),
		mode, life.Milliseconds()}
}

// admitArg is one admission as admit_one (admitone.lua) reads it: six
// little-endian doubles, tokens, key rpm, key tpm, workspace rpm, workspace
// tpm and solo (1 or 0), in one binary string, which the script unpacks at
// once instead of parsing six decimal numbers. Limits are at most
// llmrate.MaxPerMinute, below 2^53, so their doubles are exact; a token
// count past 2^53 (more than any bucket holds) rounds to the nearest double,
// as a decimal argument parsed by Lua would.
func admitArg(r llmrate.AdmitRequest) string {
	var b [48]byte
	return string(appendAdmitArg(b[:0], &r))
}

// admitAloneArg is admit.lua's argument for r (appendAloneArg).
func admitAloneArg(r llmrate.AdmitRequest, clock func() time.Time) string {
	var b [64]byte
	return string(appendAloneArg(b[:0], &r, clock))
}

// appendAloneArg appends admit.lua's argument for r: ADMIT (appendAdmitArg),
// then the time in microseconds by clock (NaN when nil: the server's TIME)
// and the identity record's life in ms, as little-endian doubles.
func appendAloneArg(b []byte, r *llmrate.AdmitRequest, clock func() time.Time) []byte {
	b = appendAdmitArg(b, r)
	now := math.NaN()
	if clock != nil {
		now = float64(clock().UnixMicro())
	}
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(now))
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(admitIDLife.Milliseconds())))
}

// appendAdmitArg appends r as admitone.lua's ADMIT: six little-endian
// doubles (tokens, key rpm, key tpm, workspace rpm, workspace tpm, solo).
func appendAdmitArg(b []byte, r *llmrate.AdmitRequest) []byte {
	var solo int64
	if r.Solo {
		solo = 1
	}
	for _, v := range [6]int64{r.Tokens, r.KeyLimits.RequestsPerMinute, r.KeyLimits.TokensPerMinute,
		r.WorkspaceLimits.RequestsPerMinute, r.WorkspaceLimits.TokensPerMinute, solo} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return b
}

func soloArg(solo bool) string {
	if solo {
		return "1"
	}
	return "0"
}

package bench

import (
	"context"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
)

// benchHashKey keys the store's names (redisstore requires a secret).
var benchHashKey = []byte("bench-secret-0123456789")

// BenchmarkRedis: admissions per second against one local redis-server,
// at 1, 16 and 64 goroutines: llmrate (four buckets, one script call),
// go-redis/redis_rate (one bucket, one script call) and a plain INCR round
// trip as the floor. Keys rotate over 1,000 so no bucket runs dry.
// Besides admissions/s: p50 and p99 latency of one admission, and the
// llmrate stores' hedges per 1,000 admissions (only admissions with an
// identity, the "-id" ones, are hedged).
// "default-batched" is WithBatching(64) (opt-in); "default-unbatched" and
// "separate" make one script call per admission, the store's default.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	// ContextTimeoutEnabled, as docs/redis.md's example: the store then calls the
	// client directly instead of bounding each call on a goroutine.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 128, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "sk-" + strconv.Itoa(i)
	}
	store, err := redisstore.New(c, redisstore.WithHashKey(benchHashKey), redisstore.WithTimeout(time.Second), redisstore.WithBatching(1))
	if err != nil {
		b.Fatal(err)
	}
	batched, err := redisstore.New(c, redisstore.WithHashKey(benchHashKey), redisstore.WithTimeout(time.Second), redisstore.WithBatching(64))
	if err != nil {
		b.Fatal(err)
	}
	lim := llmrate.Limits{RequestsPerMinute: perMinute, TokensPerMinute: perMinute}
	rr := redis_rate.NewLimiter(c)
	rrLimit := redis_rate.Limit{Rate: perMinute, Burst: perMinute, Period: time.Minute}
	ops := map[string]func(key string) error{
		"llmrate-4buckets-default-unbatched": func(key string) error {
			_, err := store.Admit(ctx, llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true})
			return err
		},
		// As the limiter sends it: with an admission identity, which Redis
		// records for 5 s so that a resend is answered once.
		"llmrate-4buckets-default-unbatched-id": func(key string) error {
			_, err := store.Admit(ctx, llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true, ID: llmrate.NewAdmissionID()})
			return err
		},
		"llmrate-4buckets-default-batched": func(key string) error {
			_, err := batched.Admit(ctx, llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true})
			return err
		},
		"llmrate-4buckets-separate": func(key string) error {
			_, err := store.Admit(ctx, llmrate.AdmitRequest{Key: key, Workspace: "ws-" + key, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1})
			return err
		},
		"redis_rate": func(key string) error {
			_, err := rr.Allow(ctx, key, rrLimit)
			return err
		},
		"plain-INCR": func(key string) error { return c.Incr(ctx, key).Err() },
	}
	for _, name := range []string{"llmrate-4buckets-default-unbatched", "llmrate-4buckets-default-unbatched-id", "llmrate-4buckets-default-batched", "llmrate-4buckets-separate", "redis_rate", "plain-INCR"} {
		op := ops[name]
		for _, g := range []int{1, 16, 64} {
			b.Run(name+"/goroutines="+strconv.Itoa(g), func(b *testing.B) {
				var n atomic.Int64
				run := func() {
					i := n.Add(1)
					if err := op(keys[i%int64(len(keys))]); err != nil {
						b.Error(err)
					}
				}
				runAdmissions(b, c, g, run, store.Hedges, batched.Hedges)
			})
		}
	}
}

// runAdmissions runs run b.N times, on this goroutine for g == 1, else
// spread over about g goroutines, and reports admissions per second, the
// 50th and 99th percentiles of one admission's latency (p50-us, p99-us),
// and CPU time per admission. hedges, when not nil, counts the hedges of
// the stores under test (redisstore's Hedges): their difference over the
// run is reported per 1,000 admissions (hedges/1k-op).
func runAdmissions(b *testing.B, c *redis.Client, g int, run func(), hedges ...func() int64) {
	hedged := func() int64 {
		var n int64
		for _, h := range hedges {
			n += h()
		}
		return n
	}
	server0, client0, hedges0 := serverCPU(b, c), clientCPU(), hedged()
	var mu sync.Mutex
	var lats []time.Duration
	timed := func(pb func() bool) {
		own := make([]time.Duration, 0, 1024)
		for pb() {
			t := time.Now()
			run()
			own = append(own, time.Since(t))
		}
		mu.Lock()
		lats = append(lats, own...)
		mu.Unlock()
	}
	b.ResetTimer()
	start := time.Now()
	if g == 1 {
		i := 0
		timed(func() bool { i++; return i <= b.N })
	} else {
		b.SetParallelism((g + 1) / 2) // GOMAXPROCS=2 on the reference machine
		b.RunParallel(func(pb *testing.PB) { timed(pb.Next) })
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "admissions/s")
	slices.Sort(lats)
	b.ReportMetric(float64(percentile(lats, 0.50))/1e3, "p50-us")
	b.ReportMetric(float64(percentile(lats, 0.99))/1e3, "p99-us")
	if len(hedges) > 0 {
		b.ReportMetric(float64(hedged()-hedges0)*1000/float64(b.N), "hedges/1k-op")
	}
	// CPU time per admission, the benchmark process's and redis-server's
	// (user + system): what the two spend on the two shared cores, which
	// other work on the machine moves less than it moves wall time.
	b.ReportMetric((clientCPU()-client0).Seconds()*1e6/float64(b.N), "client-cpu-us/op")
	b.ReportMetric((serverCPU(b, c)-server0).Seconds()*1e6/float64(b.N), "server-cpu-us/op")
}

// runPaired runs a and other on g goroutines in pairedTurns turns: each
// turn runs one max(b.N/pairedTurns, 1) times, then the other as many (a
// first every other turn, so neither always follows the other), each turn
// starting after a garbage collection (so that one's garbage is not
// collected in the other's turn). One untimed turn of each comes first:
// the pool dials its connections there, not in the first timed turn.
// Reports each one's admissions/s (over its own turns' time) and the p50
// and p99 of its latencies (a-…, b-… for other), and p99-ratio, a's p99
// over other's.
func runPaired(b *testing.B, g int, a, other func()) {
	type side struct {
		lats    []time.Duration
		elapsed time.Duration
	}
	var sides [2]side
	ops := [2]func(){a, other}
	per := max(b.N/pairedTurns, 1)
	turn := func(s *side, op func()) {
		runtime.GC()
		var next atomic.Int64
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		for range g {
			wg.Go(func() {
				own := make([]time.Duration, 0, per/g+1)
				for next.Add(1) <= int64(per) {
					t := time.Now()
					op()
					own = append(own, time.Since(t))
				}
				mu.Lock()
				s.lats = append(s.lats, own...)
				mu.Unlock()
			})
		}
		wg.Wait()
		s.elapsed += time.Since(start)
	}
	for i := range sides {
		turn(&sides[i], ops[i])
		sides[i] = side{}
	}
	b.ResetTimer()
	for i := range pairedTurns {
		first := i % 2
		turn(&sides[first], ops[first])
		turn(&sides[1-first], ops[1-first])
	}
	b.StopTimer()
	var p99 [2]float64
	for i, name := range []string{"a", "b"} {
		s := &sides[i]
		slices.Sort(s.lats)
		p99[i] = float64(percentile(s.lats, 0.99)) / 1e3
		b.ReportMetric(float64(len(s.lats))/s.elapsed.Seconds(), name+"-admissions/s")
		b.ReportMetric(float64(percentile(s.lats, 0.50))/1e3, name+"-p50-us")
		b.ReportMetric(p99[i], name+"-p99-us")
	}
	b.ReportMetric(p99[0]/p99[1], "p99-ratio")
}

// pairedTurns is how many turns runPaired gives each of the two.
const pairedTurns = 10

// percentile is the q-quantile of sorted (nearest rank), 0 when empty.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// serverCPU is the CPU time redis-server has used, user and system, as its
// INFO cpu section reports it (to the microsecond).
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += time.Duration(f * float64(time.Second))
		}
	}
	return total
}

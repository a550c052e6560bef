package bench

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"
)

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

const floodKeys = 1_000_000

// llmrateFill tracks n distinct keys, each in a workspace of its own name:
// solo as the limiter's default does, or as two entries (WithWorkspace).
func llmrateFill(solo bool) func(n int) any {
	return func(n int) any {
		lim := llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 200_000}
		s := llmrate.NewMemoryStore(llmrate.WithMaxKeys(2 * n))
		now := time.Now()
		for i := range n {
			k := keyName(i)
			_, _ = s.Admit(context.Background(), llmrate.AdmitRequest{Key: k, Workspace: k, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: solo, Now: now})
		}
		return s
	}
}

// keyName returns a realistic 51-byte API key; its bytes are counted by the
// peers that keep the key string (llmrate keeps a hash only).
func keyName(i int) string {
	return "sk-proj-" + strconv.Itoa(100000000+i) + "0123456789abcdefghijklmnopqrstu"
}

// BenchmarkMemoryPerKey reports the heap per tracked key+workspace pair
// after 1,000,000 distinct keys (each key its own workspace), heap after GC.
func BenchmarkMemoryPerKey(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		fill func(n int) any
	}{
		{"llmrate-default", llmrateFill(true)},
		{"llmrate-separate", llmrateFill(false)},
		{"x-time-rate-map", func(n int) any {
			m := map[string]*rate.Limiter{}
			var mu sync.Mutex
			for i := range n {
				mu.Lock()
				l := rate.NewLimiter(100, 200)
				m[keyName(i)] = l
				mu.Unlock()
				l.Allow()
			}
			return m
		}},
		{"go-limiter", func(n int) any {
			s, _ := memorystore.New(&memorystore.Config{Tokens: 100, Interval: time.Minute, SweepInterval: time.Hour})
			for i := range n {
				_, _, _, _, _ = s.Take(ctx, keyName(i))
			}
			return s
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				before := heap()
				keep := c.fill(floodKeys)
				after := heap()
				b.ReportMetric(float64(after-before)/floodKeys, "B/key")
				runtime.KeepAlive(keep)
				if s, ok := keep.(interface{ Close(context.Context) error }); ok {
					_ = s.Close(ctx)
				}
			}
		})
	}
}

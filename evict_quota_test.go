package llmrate_test

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key flood never gives back a spent quota: a key that spent its whole
// {24h, 10 requests} window (or its calendar day) is still refused after
// 8,192 one-request made-up keys at WithMaxKeys(4096). The spent windows
// are kept beyond the bound (OverBound), as debts are.
func TestKeyFloodKeepsASpentQuota(t *testing.T) {
	t.Parallel()
	for name, w := range map[string]llmrate.Window{
		"rolling 24h":  {Per: 24 * time.Hour, Requests: 10},
		"calendar day": {Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 10},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := llmrate.NewMemoryStore(llmrate.WithMaxKeys(4096))
			h := newHarness(t, okHandler, llmrate.WithStore(s),
				llmrate.WithTiers(uniform(llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000_000, Windows: []llmrate.Window{w}})))
			for i := range 10 {
				require.Equal(t, http.StatusOK, h.send("sk-victim", 0).Code, "request %d of the day's 10", i+1)
			}
			require.Equal(t, http.StatusTooManyRequests, h.send("sk-victim", 0).Code, "the day is spent")
			for i := range 8192 {
				h.clock.Advance(time.Millisecond)
				require.Equal(t, http.StatusOK, h.send("sk-flood-"+strconv.Itoa(i), 0).Code)
			}
			w := h.send("sk-victim", 0)
			assert.Equal(t, http.StatusTooManyRequests, w.Code, "the flood gave no quota back")
			assert.Positive(t, s.OverBound(), "the spent windows went beyond the bound")
		})
	}
}

// BenchmarkKeyFloodHeldQuotaMemory measures what a flood of one-request
// keys holds at WithMaxKeys(4096) once every key's window holds spend
// (none is evicted): the heap's growth per key (B/key), by window kind.
func BenchmarkKeyFloodHeldQuotaMemory(b *testing.B) {
	for name, ws := range map[string][]llmrate.Window{
		"none":         nil,
		"rolling-24h":  {{Per: 24 * time.Hour, Requests: 10}},
		"calendar-day": {{Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 10}},
		"both":         {{Per: 24 * time.Hour, Requests: 10}, {Calendar: llmrate.CalendarMonth, Zone: time.UTC, Tokens: 1_000_000}},
	} {
		b.Run(name, func(b *testing.B) {
			lim := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000_000, Windows: ws}
			s := llmrate.NewMemoryStore(llmrate.WithMaxKeys(4096))
			now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = "sk-flood-" + strconv.Itoa(i)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for i := range b.N {
				r := llmrate.AdmitRequest{Key: keys[i], Workspace: keys[i], KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true, Now: now.Add(time.Duration(i) * time.Microsecond)}
				if d, err := s.Admit(context.Background(), r); err != nil || !d.Allowed {
					b.Fatalf("Admit: %v %+v", err, d)
				}
			}
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "B/key")
			b.ReportMetric(float64(s.OverBound())/float64(b.N), "over/key")
			runtime.KeepAlive(s)
		})
	}
}

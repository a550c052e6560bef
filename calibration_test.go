package llmrate_test

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/usage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reportHandler reports the usage named by the request's X-In and X-Out
// headers (none when X-In is absent).
var reportHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	in, err := strconv.ParseInt(r.Header.Get("X-In"), 10, 64)
	if err != nil {
		in = -1
	}
	out, _ := strconv.ParseInt(r.Header.Get("X-Out"), 10, 64)
	usageHandler(in, out).ServeHTTP(w, r)
})

// calSend sends a request whose raw estimate (Content-Length/4) is raw and
// whose provider reports in + out tokens, and returns the estimate the
// decision debited.
func calSend(t *testing.T, h *harness, rec *recorder, model string, raw, in, out int64) int64 {
	t.Helper()
	hdr := []string{"X-Model", model, "X-In", strconv.FormatInt(in, 10), "X-Out", strconv.FormatInt(out, 10)}
	if in < 0 {
		hdr = hdr[:2]
	}
	w := postBody(h.h, "sk-cal", strings.Repeat("x", int(4*raw)), hdr...)
	require.Equal(t, http.StatusOK, w.Code)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.decisions[len(rec.decisions)-1].Estimate
}

var calLimits = llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000_000}

// wantScaled is §17's scaled estimate, computed with big.Rat: ⌈raw × r⌉
// with r = Σactual / Σraw over the last 64 samples, bounded to [1/4, 4],
// at least 1; raw itself under 8 samples.
func wantScaled(raw int64, samples [][2]int64) (int64, *big.Rat) {
	if len(samples) > 64 {
		samples = samples[len(samples)-64:]
	}
	if len(samples) < 8 {
		return raw, nil
	}
	var sr, sa big.Int
	for _, s := range samples {
		sr.Add(&sr, big.NewInt(s[0]))
		sa.Add(&sa, big.NewInt(s[1]))
	}
	r := new(big.Rat).SetFrac(&sa, &sr)
	if lo := big.NewRat(1, 4); r.Cmp(lo) < 0 {
		r = lo
	}
	if hi := big.NewRat(4, 1); r.Cmp(hi) > 0 {
		r = hi
	}
	x := new(big.Rat).Mul(r, new(big.Rat).SetInt64(raw))
	q, m := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return max(1, q.Int64()), r
}

// Under 8 samples nothing scales; from the 8th on, each estimate is the raw
// one times the ratio of sums over the last 64, bounded, as big.Rat
// computes it; Calibration reports the ratio in force.
func TestCalibrationLearns(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, reportHandler, llmrate.WithTiers(uniform(calLimits)), llmrate.WithModel(llmrate.Header("X-Model")),
		llmrate.WithCalibration(), llmrate.WithObserver(rec))
	rng := rand.New(rand.NewPCG(1, 2))
	var samples [][2]int64
	for i := range 200 {
		raw := 1 + rng.Int64N(2000)
		// Phases: outputs 3× the estimate, then wild, then far below it.
		var actual int64
		switch {
		case i < 40:
			actual = 3*raw + rng.Int64N(50)
		case i < 120:
			actual = rng.Int64N(20 * raw)
		default:
			actual = raw/10 + 1
		}
		want, _ := wantScaled(raw, samples)
		got := calSend(t, h, rec, "gpt-4o", raw, actual/3, actual-actual/3)
		require.Equal(t, want, got, "request %d: raw %d", i, raw)
		samples = append(samples, [2]int64{raw, actual})
		if _, r := wantScaled(1, samples); r != nil {
			f, _ := r.Float64()
			assert.InDelta(t, f, h.lim.Calibration()["gpt-4o"], 1e-12, "request %d", i)
		} else {
			assert.NotContains(t, h.lim.Calibration(), "gpt-4o", "request %d: under 8 samples", i)
		}
	}
	assert.Equal(t, 0.25, h.lim.Calibration()["gpt-4o"], "bounded below")
}

// The first seven reconciles leave estimates alone; the eighth's ratio
// applies to the ninth request: 3 × 1000.
func TestCalibrationWorkedExample(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, reportHandler, llmrate.WithTiers(uniform(calLimits)), llmrate.WithCalibration(), llmrate.WithObserver(rec))
	for i := range 8 {
		assert.Equal(t, int64(1000), calSend(t, h, rec, "", 1000, 1000, 2000), "request %d", i)
	}
	assert.Equal(t, map[string]float64{"": 3}, h.lim.Calibration(), "without WithModel every request is model \"\"")
	assert.Equal(t, int64(3000), calSend(t, h, rec, "", 1000, 1000, 2000))
	assert.Equal(t, int64(3), calSend(t, h, rec, "", 1, 1, 2), "⌈1 × 3⌉: the ninth sample kept the ratio at 3")
	rec.mu.Lock()
	last := rec.reconciles[len(rec.reconciles)-1]
	rec.mu.Unlock()
	assert.Equal(t, int64(3), last.Estimate, "the reconcile's estimate is the scaled one")
}

// The upper bound: a ratio of 10 applies as 4.
func TestCalibrationBoundAbove(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, reportHandler, llmrate.WithTiers(uniform(calLimits)), llmrate.WithCalibration(), llmrate.WithObserver(rec))
	for range 8 {
		calSend(t, h, rec, "", 100, 500, 500)
	}
	assert.Equal(t, 4.0, h.lim.Calibration()[""])
	assert.Equal(t, int64(400), calSend(t, h, rec, "", 100, 500, 500))
}

// Only reconciles with final usage teach: error bodies and responses
// without usage do not.
func TestCalibrationLearnsOnlyFinalUsage(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, reportHandler, llmrate.WithTiers(uniform(calLimits)), llmrate.WithCalibration(), llmrate.WithObserver(rec))
	for range 20 {
		calSend(t, h, rec, "", 100, -1, 0) // no usage: estimated
	}
	assert.Empty(t, h.lim.Calibration())
	for _, ev := range rec.reconciles {
		assert.Equal(t, llmrate.ReconcileEstimated, ev.Kind)
	}
}

// A cost function's charge is what is learned; a panicking one teaches
// nothing.
func TestCalibrationLearnsTheCharge(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	boom := false
	h := newHarness(t, reportHandler, llmrate.WithTiers(uniform(calLimits)), llmrate.WithCalibration(), llmrate.WithObserver(rec),
		llmrate.WithTokenCost(func(_ string, u usage.Usage) int64 {
			if boom {
				panic("boom")
			}
			return u.InputTokens + 4*u.OutputTokens
		}))
	for range 8 {
		calSend(t, h, rec, "", 100, 50, 50) // charge 250
	}
	assert.Equal(t, 2.5, h.lim.Calibration()[""])
	boom = true
	for range 64 {
		calSend(t, h, rec, "", 100, 1, 1)
	}
	assert.Equal(t, 2.5, h.lim.Calibration()[""], "the faulted charges taught nothing")
	assert.Equal(t, int64(64), h.lim.FailOpens())
}

// Models learn apart (the bound on what is learned at once, and its
// recency order: TestCalibrationPairsBounded).
func TestCalibrationModels(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, reportHandler, llmrate.WithTiers(uniform(calLimits)), llmrate.WithModel(llmrate.Header("X-Model")),
		llmrate.WithCalibration(), llmrate.WithObserver(rec))
	for i := range 3 {
		for range 8 {
			calSend(t, h, rec, fmt.Sprintf("m%d", i), 10, 0, 10*int64(i+1))
		}
	}
	assert.Equal(t, map[string]float64{"m0": 1, "m1": 2, "m2": 3}, h.lim.Calibration())
	assert.Equal(t, map[string]float64{"m0": 1, "m1": 2, "m2": 3}, h.lim.CalibrationFor("sk-cal"), "the workspace is the key")
	assert.Equal(t, int64(20), calSend(t, h, rec, "m1", 10, -1, 0))
	assert.Equal(t, int64(30), calSend(t, h, rec, "m2", 10, -1, 0))
}

// Concurrent requests of several models: the race detector's test, and the
// learned ratios come out exact.
func TestCalibrationConcurrent(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, reportHandler, llmrate.WithTiers(uniform(calLimits)), llmrate.WithModel(llmrate.Header("X-Model")),
		llmrate.WithCalibration(), llmrate.WithObserver(rec))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			model := "m" + strconv.Itoa(g%4)
			for range 100 {
				w := postBody(h.h, "sk-c"+strconv.Itoa(g), strings.Repeat("x", 400), "X-Model", model, "X-In", "100", "X-Out", strconv.Itoa(100*(g%4)))
				if w.Code != http.StatusOK {
					t.Errorf("status %d", w.Code)
				}
				_ = h.lim.Calibration()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, map[string]float64{"m0": 1, "m1": 2, "m2": 3, "m3": 4}, h.lim.Calibration())
}

// Without WithCalibration, Calibration is nil and estimates are the
// estimator's.
func TestCalibrationOff(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, reportHandler, llmrate.WithTiers(uniform(calLimits)), llmrate.WithObserver(rec))
	for range 10 {
		assert.Equal(t, int64(100), calSend(t, h, rec, "", 100, 300, 300))
	}
	assert.Nil(t, h.lim.Calibration())
}

// A model name above 256 bytes is neither learned nor scaled.
func TestCalibrationLongNames(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := newHarness(t, reportHandler, llmrate.WithTiers(uniform(calLimits)), llmrate.WithModel(llmrate.Header("X-Model")),
		llmrate.WithCalibration(), llmrate.WithObserver(rec))
	long, limit := strings.Repeat("m", 257), strings.Repeat("m", 256)
	for range 10 {
		assert.Equal(t, int64(100), calSend(t, h, rec, long, 100, 100, 200))
		calSend(t, h, rec, limit, 100, 100, 200)
	}
	assert.Equal(t, map[string]float64{limit: 3}, h.lim.Calibration())
}

// A learned ratio never makes a request that fits a full bucket unable to
// fit ever: the scaled estimate is held to the smallest tokens bucket's
// capacity, so the request is admitted once the bucket is full again, not
// refused with "retrying will not help".
func TestCalibrationNeverTurnsAFitIntoNeverFits(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	lim := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1000} // tokens capacity 2,000
	h := newHarness(t, reportHandler, llmrate.WithTiers(uniform(lim)), llmrate.WithCalibration(), llmrate.WithObserver(rec))
	for range 8 {
		calSend(t, h, rec, "", 10, 0, 40) // ratio 4
	}
	require.Equal(t, 4.0, h.lim.Calibration()[""])
	h.clock.Advance(10 * time.Minute) // full again
	// Raw 600 fits the 2,000-token bucket; scaled ×4 it would be 2,400.
	assert.Equal(t, int64(2000), calSend(t, h, rec, "", 600, 0, 600))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	last := rec.decisions[len(rec.decisions)-1]
	assert.True(t, last.Allowed)
	assert.False(t, last.NeverFits)
}

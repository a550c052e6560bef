package llmrate_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/usage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// noUsageStream answers as OpenAI's default stream does: no usage, and
// 400 bytes of generated text (⌊400 / 4⌋ = 100 output tokens by §5's rule).
var noUsageStream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = w.Write([]byte("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" +
		strings.Repeat("x", 400) + "\"}}]}\n\ndata: [DONE]\n\n"))
})

// calRouter sends requests with X-Stream to noUsageStream, the others to
// reportHandler.
var calRouter = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Stream") != "" {
		noUsageStream.ServeHTTP(w, r)
		return
	}
	reportHandler.ServeHTTP(w, r)
})

// wsSend sends, for workspace ws and model, a request whose raw estimate
// (Content-Length / 4) is raw, reporting in + out tokens (in < 0: the
// no-usage stream), and returns its status, the estimate its decision
// debited and what its reconcile charged (-1 when it was refused).
func wsSend(t *testing.T, h *harness, rec *recorder, ws, model string, raw, in, out int64) (int, int64, int64) {
	t.Helper()
	hdr := []string{"X-Workspace", ws, "X-Model", model, "X-In", strconv.FormatInt(in, 10), "X-Out", strconv.FormatInt(out, 10)}
	if in < 0 {
		hdr = []string{"X-Workspace", ws, "X-Model", model, "X-Stream", "1"}
	}
	rec.mu.Lock()
	nrec := len(rec.reconciles)
	rec.mu.Unlock()
	w := postBody(h.h, "sk-"+ws, strings.Repeat("x", int(4*raw)), hdr...)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	est := rec.decisions[len(rec.decisions)-1].Estimate
	charged := int64(-1)
	if len(rec.reconciles) > nrec {
		charged = rec.reconciles[len(rec.reconciles)-1].Actual
	}
	return w.Code, est, charged
}

func newWSHarness(t *testing.T, lim llmrate.Limits, opts ...llmrate.Option) (*harness, *recorder) {
	rec := &recorder{}
	h := newHarness(t, calRouter, append([]llmrate.Option{llmrate.WithTiers(uniform(lim)), llmrate.WithWorkspace(llmrate.Header("X-Workspace")),
		llmrate.WithModel(llmrate.Header("X-Model")), llmrate.WithCalibration(), llmrate.WithObserver(rec)}, opts...)...)
	return h, rec
}

// One workspace pushing a shared model's ratio to 4 moves neither another
// workspace's admission estimate nor what its responses are charged: the
// issue's numbers, 1,100 (not 4,400) debited and 1,200 (not 4,500)
// charged for a response without usage.
func TestCalibrationIsPerWorkspace(t *testing.T) {
	t.Parallel()
	h, rec := newWSHarness(t, calLimits)
	code, est, charged := wsSend(t, h, rec, "b", "gpt-4o", 1100, -1, 0)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, int64(1100), est)
	assert.Equal(t, int64(1100+100), charged, "the raw estimate plus ⌊400 / 4⌋")
	for range 8 {
		// Small prompts, long outputs: the charge is 8× the estimate.
		_, _, charged := wsSend(t, h, rec, "a", "gpt-4o", 100, 100, 700)
		require.Equal(t, int64(800), charged)
	}
	assert.Equal(t, map[string]float64{"gpt-4o": 4}, h.lim.CalibrationFor("a"))
	assert.Empty(t, h.lim.CalibrationFor("b"), "b has learned nothing")
	assert.Equal(t, map[string]float64{"gpt-4o": 4}, h.lim.Calibration(), "the fleet view")

	code, est, charged = wsSend(t, h, rec, "b", "gpt-4o", 1100, -1, 0)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, int64(1100), est, "a's ratio does not move b's admission")
	assert.Equal(t, int64(1200), charged, "an identical response costs b what it cost before")
	_, est, _ = wsSend(t, h, rec, "a", "gpt-4o", 1100, 100, 700)
	assert.Equal(t, int64(4400), est, "a's own admissions scale")
	_, est, _ = wsSend(t, h, rec, "a", "other-model", 1100, 100, 700)
	assert.Equal(t, int64(1100), est, "per model too")
}

// A response without final usage is charged from the raw estimate, so
// what it costs never depends on what was learned; only the debit at
// admission is scaled.
func TestCalibrationChargesFromTheRawEstimate(t *testing.T) {
	t.Parallel()
	h, rec := newWSHarness(t, calLimits)
	_, _, before := wsSend(t, h, rec, "a", "m", 1100, -1, 0)
	for range 8 {
		wsSend(t, h, rec, "a", "m", 100, 100, 700) // ratio 8, bounded to 4
	}
	_, est, after := wsSend(t, h, rec, "a", "m", 1100, -1, 0)
	assert.Equal(t, int64(4400), est, "admission debits the scaled estimate")
	assert.Equal(t, int64(1200), before)
	assert.Equal(t, before, after, "the same response is charged the same")

	for range 64 {
		wsSend(t, h, rec, "a", "m", 16000, 1, 1) // ratio 2/16000, bounded to 1/4
	}
	require.Equal(t, 0.25, h.lim.CalibrationFor("a")["m"])
	_, est, after = wsSend(t, h, rec, "a", "m", 1100, -1, 0)
	assert.Equal(t, int64(275), est)
	assert.Equal(t, before, after, "scaled down, the same")
}

// A cost function is passed the raw estimate as the input of a response
// without usage.
func TestCalibrationTokenCostGetsTheRawEstimate(t *testing.T) {
	t.Parallel()
	var got []usage.Usage
	h, rec := newWSHarness(t, calLimits, llmrate.WithTokenCost(func(_ string, u usage.Usage) int64 {
		got = append(got, u)
		return u.InputTokens + u.OutputTokens
	}))
	for range 8 {
		wsSend(t, h, rec, "a", "m", 100, 100, 700)
	}
	got = nil
	_, est, charged := wsSend(t, h, rec, "a", "m", 1100, -1, 0)
	assert.Equal(t, int64(4400), est)
	assert.Equal(t, []usage.Usage{{InputTokens: 1100, OutputTokens: 100}}, got)
	assert.Equal(t, int64(1200), charged)
}

// Whether a request ever fits is decided on its raw estimate: a ratio
// learned at 0.25 does not let a request through whose raw estimate
// exceeds the tokens bucket (16,004 would debit 4,001 and fit), and the
// refusal says retrying will not help.
func TestCalibrationNeverFitsOnTheRawEstimate(t *testing.T) {
	t.Parallel()
	lim := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 5000} // tokens capacity 10,000
	h, rec := newWSHarness(t, lim)
	for range 8 {
		// max_tokens 16,000 in the estimate, one-token answers.
		wsSend(t, h, rec, "a", "m", 1000, 1, 1)
		h.clock.Advance(time.Minute)
	}
	require.Equal(t, 0.25, h.lim.CalibrationFor("a")["m"])
	h.clock.Advance(10 * time.Minute) // full again
	code, est, _ := wsSend(t, h, rec, "a", "m", 16004, 1, 1)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Equal(t, int64(16004), est, "the raw estimate, unscaled")
	rec.mu.Lock()
	last := rec.decisions[len(rec.decisions)-1]
	rec.mu.Unlock()
	assert.False(t, last.Allowed)
	assert.True(t, last.NeverFits)

	code, est, _ = wsSend(t, h, rec, "a", "m", 9000, 1, 1)
	assert.Equal(t, http.StatusOK, code, "a raw estimate that fits is scaled as learned")
	assert.Equal(t, int64(2250), est)
}

// At most 4,096 (workspace, model) pairs are learned; the least recently
// used (admitted or reconciled) is dropped first.
func TestCalibrationPairsBounded(t *testing.T) {
	t.Parallel()
	h, rec := newWSHarness(t, calLimits)
	for range 8 {
		wsSend(t, h, rec, "w0", "m", 10, 0, 20) // ratio 2
		wsSend(t, h, rec, "w1", "m", 10, 0, 30) // ratio 3
	}
	for i := range 4094 { // 4,096 pairs in all
		wsSend(t, h, rec, "x"+strconv.Itoa(i), "m", 10, 0, 10)
	}
	assert.Equal(t, map[string]float64{"m": 2}, h.lim.CalibrationFor("w0"))
	assert.Equal(t, map[string]float64{"m": 3}, h.lim.CalibrationFor("w1"))
	// w0 is used again (an admission scales its estimate): w1 is now the
	// least recently used, and goes for a new pair.
	_, est, _ := wsSend(t, h, rec, "w0", "m", 10, -1, 0)
	assert.Equal(t, int64(20), est)
	wsSend(t, h, rec, "new", "m", 10, 0, 10)
	assert.Equal(t, map[string]float64{"m": 2}, h.lim.CalibrationFor("w0"))
	assert.Empty(t, h.lim.CalibrationFor("w1"))
	_, est, _ = wsSend(t, h, rec, "w1", "m", 10, -1, 0)
	assert.Equal(t, int64(10), est, "w1 was forgotten: its estimate is raw again")
}

// Calibration is per model over every workspace's samples: the ratio of
// their sums, absent under 8 samples in all; CalibrationFor is nil
// without WithCalibration.
func TestCalibrationFleetView(t *testing.T) {
	t.Parallel()
	h, rec := newWSHarness(t, calLimits)
	for range 4 {
		wsSend(t, h, rec, "a", "m", 100, 0, 100) // 400 raw, 400 charged
		wsSend(t, h, rec, "b", "m", 100, 0, 300) // 400 raw, 1,200 charged
	}
	assert.Empty(t, h.lim.CalibrationFor("a"), "4 samples each")
	assert.Empty(t, h.lim.CalibrationFor("b"))
	assert.Equal(t, map[string]float64{"m": 2}, h.lim.Calibration(), "(400 + 1,200) / (400 + 400)")

	off := newHarness(t, okHandler)
	assert.Nil(t, off.lim.CalibrationFor("a"))
}

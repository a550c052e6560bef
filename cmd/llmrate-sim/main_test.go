package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGeneratedWorkload(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "plot.svg")
	var out strings.Builder
	require.NoError(t, run([]string{"-tier", "free", "-rps", "5", "-tokens", "1000", "-duration", "3m", "-svg", svg}, &out))
	// 900 requests, one per 0.2 s: the burst of 200 plus 100/min over the
	// 179.8 s to the last request = 200 + 299.
	assert.Contains(t, out.String(), "admitted 499 requests")
	assert.Contains(t, out.String(), "by key_requests       401")
	assert.Contains(t, out.String(), " 1: 401")
	b, err := os.ReadFile(svg)
	require.NoError(t, err)
	var doc struct {
		XMLName xml.Name
		Lines   []struct {
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
	}
	require.NoError(t, xml.Unmarshal(b, &doc), "the SVG is well-formed XML")
	assert.Equal(t, "svg", doc.XMLName.Local)
	assert.Len(t, doc.Lines, 4, "offered and admitted, requests and tokens")
}

func TestTrace(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	for range 250 {
		lines = append(lines, `{"t":0,"key":"sk-a","tokens":10}`)
	}
	lines = append(lines, `{"t":1,"key":"sk-b","workspace":"w","tokens":500000,"estimate":500000}`)
	trace := filepath.Join(dir, "t.jsonl")
	require.NoError(t, os.WriteFile(trace, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	var out strings.Builder
	require.NoError(t, run([]string{"-tier", "free", "-trace", trace}, &out))
	assert.Contains(t, out.String(), "admitted 200 requests")
	assert.Contains(t, out.String(), "by key_requests       50")
	assert.Contains(t, out.String(), "by key_tokens         1")
	assert.Contains(t, out.String(), "never fit (larger than a whole bucket): 1")
	assert.Contains(t, out.String(), " 1: 50")
	assert.Contains(t, out.String(), "60: 1")

	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"t":2,"key":"a","tokens":1}`+"\n"+`{"t":1,"key":"a","tokens":1}`+"\n"), 0o644))
	assert.ErrorContains(t, run([]string{"-trace", bad}, &out), "in order")
	assert.Error(t, run([]string{"-tier", "platinum"}, &out))
}

// TestModelLimits: a trace over three models, two of them under model
// limits, reports admission per model limit and draws it.
func TestModelLimits(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	for i := range 30 {
		model := []string{"gpt-4o", "gpt-4o-mini", "llama-3"}[i%3]
		lines = append(lines, `{"t":0,"key":"sk-a","model":"`+model+`","tokens":10}`)
	}
	trace := filepath.Join(dir, "t.jsonl")
	require.NoError(t, os.WriteFile(trace, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	svg := filepath.Join(dir, "m.svg")
	var out strings.Builder
	require.NoError(t, run([]string{"-trace", trace, "-model-limits", "gpt-4o*=2/1000,o3=1/10", "-svg", svg}, &out))
	// 20 gpt-4o* requests share one limit: a burst of 4; the 10 llama-3
	// requests spend the Free tier's default buckets (burst 200).
	assert.Contains(t, out.String(), "admitted 14 requests")
	assert.Contains(t, out.String(), "  (default buckets)    10, 10 (100.0%)")
	assert.Contains(t, out.String(), "  gpt-4o*              20, 4 (20.0%)")
	b, err := os.ReadFile(svg)
	require.NoError(t, err)
	var doc struct {
		Lines []struct {
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
	}
	require.NoError(t, xml.Unmarshal(b, &doc))
	assert.Len(t, doc.Lines, 6, "4 as before, plus one per model limit seen")
	assert.Contains(t, string(b), "gpt-4o*: 4 of 20 admitted")

	assert.ErrorContains(t, run([]string{"-trace", trace, "-model-limits", "gpt-4o=2"}, &out), "want name=requests/tokens")
	assert.ErrorContains(t, run([]string{"-trace", trace, "-model-limits", "gpt-*o=2/3"}, &out), "may only end a name")
}

// TestFanout: the fan-out comparison through the real limiter. Estimates
// are checked against hand-computed ones (every request of the trace has
// the same body length and max_tokens), the replay is deterministic, and
// the claims docs/cost.md makes hold: the default estimate lets the
// bursts' consumption past what an exact bucket could have admitted,
// EstimateFromBody does not, and calibration admits more than
// EstimateFromBody once it has learned.
func TestFanout(t *testing.T) {
	f := DefaultFanout()
	rs, err := RunFanout(f, FanoutConfigs()[:3])
	require.NoError(t, err)
	again, err := RunFanout(f, FanoutConfigs()[:3])
	require.NoError(t, err)
	assert.Equal(t, rs, again, "deterministic")

	body := f.requests()[0].body
	system := len("You are one of fifty sub-agents.")
	assert.Equal(t, int64(len(body)/4), rs[0].MeanEstimate, "the default estimate is Content-Length / 4")
	assert.Equal(t, int64((system+f.PromptBytes+3)/4)+f.MaxTokens, rs[1].MeanEstimate, "EstimateFromBody: ⌈text / 4⌉ + max_tokens")

	assert.Positive(t, rs[0].BeyondExact, "the default estimate admits past an exact bucket")
	assert.LessOrEqual(t, rs[1].BeyondExact, int64(0), "EstimateFromBody does not")
	assert.Less(t, rs[2].BeyondExact, rs[0].BeyondExact, "calibration keeps it far below the default")
	assert.Greater(t, rs[2].Admitted, rs[1].Admitted, "and admits more than EstimateFromBody alone, once it has learned")
	assert.InDelta(t, float64(rs[2].MeanActual)/float64(f.MaxTokens+int64((system+f.PromptBytes+3)/4)), rs[2].CalibrationAtEnd, 0.05,
		"the ratio learned is about the charge over the raw estimate")

	var out strings.Builder
	require.NoError(t, run([]string{"-fanout", "-tpm", "200000"}, &out))
	assert.Contains(t, out.String(), "one key at 200000 tokens/min")
	assert.Contains(t, out.String(), "EstimateFromBody + WithCalibration")
}

// TestFlow: with a concurrency figure and a max wait, a hand-worked trace
// (60 RPM and 6,000 TPM: 100 tokens a second into a bucket of 12,000; 2 in
// flight; waits up to 5 s) is split into admitted at once, waited and
// refused, by gauge and by bucket.
func TestFlow(t *testing.T) {
	dir := t.TempDir()
	lines := []string{
		`{"t":0,"key":"sk-a","tokens":12000,"duration":10}`, // the whole bucket, in flight until t=10
		`{"t":0,"key":"sk-a","tokens":100,"duration":1}`,    // waits 1 s (holding its slot), ends at t=2
		`{"t":0,"key":"sk-a","tokens":100}`,                 // 2 in flight: refused by the gauge, Retry-After 2 (the buckets' 200 short)
		`{"t":3,"key":"sk-a","tokens":100}`,                 // -100 + 300 refilled: at once
		`{"t":3,"key":"sk-a","tokens":1000}`,                // 100 left: 9 s short, past 5 s
	}
	trace := filepath.Join(dir, "t.jsonl")
	require.NoError(t, os.WriteFile(trace, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	svg := filepath.Join(dir, "flow.svg")
	var out strings.Builder
	require.NoError(t, run([]string{"-trace", trace, "-rpm", "60", "-tpm", "6000", "-concurrency", "2", "-max-wait", "5s", "-svg", svg}, &out))
	for _, want := range []string{
		"admitted 2 requests at once",
		"waited   1 requests (20.0%), then admitted: wait median 1s, max 1s",
		"refused  2 requests",
		"by key_concurrent       1",
		"by key_tokens           1",
		"in flight at most 2 (figure 2)",
		"   2: 1\n",
		"   9: 1\n",
	} {
		assert.Contains(t, out.String(), want)
	}
	b, err := os.ReadFile(svg)
	require.NoError(t, err)
	var doc struct {
		Lines []struct {
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
	}
	require.NoError(t, xml.Unmarshal(b, &doc), "the SVG is well-formed XML")
	assert.Len(t, doc.Lines, 5, "offered, at once, waited, refused; in flight")

	assert.ErrorContains(t, run([]string{"-trace", trace, "-max-wait", "61s"}, &out), "-max-wait")
	assert.ErrorContains(t, run([]string{"-trace", trace, "-concurrency", "2", "-model-limits", "a=1/2"}, &out), "cannot be combined")
}

// TestPriority: the -priority scenario. Without a reserve the batch job
// crowds the product out; with the batch class's reserve of one half
// every product request is admitted (it never spends more than the
// refill), the batch job only what is left above the floor.
func TestPriority(t *testing.T) {
	s := DefaultPriority()
	runs, err := RunPriority(s)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	off, on := runs[0], runs[1]
	assert.Equal(t, off.Interactive.Offered, on.Interactive.Offered, "one trace for both runs")
	assert.Less(t, off.Interactive.Admitted, off.Interactive.Offered, "no reserve: the product is refused too")
	assert.Equal(t, on.Interactive.Offered, on.Interactive.Admitted, "with the reserve: every product request")
	assert.Less(t, on.Batch.Admitted, off.Batch.Admitted, "the batch job gives way")
	// The batch job never takes the workspace's bucket below half: over
	// its 120 s it gets at most the 60,000 tokens above the floor plus
	// the refill, 1,000 a second.
	assert.LessOrEqual(t, on.Batch.Admitted*1000, 60_000+1000*120)

	svg := filepath.Join(t.TempDir(), "p.svg")
	var out strings.Builder
	require.NoError(t, run([]string{"-priority", "-svg", svg}, &out))
	assert.Contains(t, out.String(), "| batch reserve 0.5 |")
	b, err := os.ReadFile(svg)
	require.NoError(t, err)
	var doc struct {
		XMLName xml.Name
		Lines   []struct {
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
	}
	require.NoError(t, xml.Unmarshal(b, &doc), "the SVG is well-formed XML")
	assert.Len(t, doc.Lines, 6, "per run: each class admitted, the product offered")
	assert.Error(t, run([]string{"-priority", "-reserve", "1"}, &out), "a reserve outside (0, 1): WithPriority's ConfigError")
}

package usageref

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Fixture is one entry of testdata/usage/manifest.json or
// manifest-eventstream.json.
type Fixture struct {
	File            string `json:"file"`
	ContentType     string `json:"content_type"`
	ContentEncoding string `json:"content_encoding"`
	Status          int    `json:"status"`
	Input           *int64 `json:"expected_input_tokens"`
	Output          *int64 `json:"expected_output_tokens"`
	// The breakdown of the usage (docs/cost.md "What a response is charged"), 0 when absent.
	Cached    int64  `json:"expected_cached_input_tokens"`
	CacheW    int64  `json:"expected_cache_write_tokens"`
	Reasoning int64  `json:"expected_reasoning_tokens"`
	Note      string `json:"note"`
}

// Manifests are the manifests in testdata/usage: the text bodies, and the
// AWS event streams written by eventstream_gen.go.
var Manifests = []string{"manifest.json", "manifest-eventstream.json"}

// LoadFixtures reads every manifest in dir, in order.
func LoadFixtures(t testing.TB, dir string) []Fixture {
	t.Helper()
	var all []Fixture
	for _, name := range Manifests {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		var m struct {
			Fixtures []Fixture `json:"fixtures"`
		}
		require.NoError(t, json.Unmarshal(raw, &m)) // counts decode into int64, never float64
		require.NotEmpty(t, m.Fixtures, name)
		all = append(all, m.Fixtures...)
	}
	return all
}

// Splits returns the ways a body is cut into writes: whole, one byte at a
// time, seeded random sizes, and 64 KiB.
func Splits(body []byte, seed uint64) map[string][][]byte {
	out := map[string][][]byte{"whole": {body}}
	var ones, rnd, big [][]byte
	for i := range body {
		ones = append(ones, body[i:i+1])
	}
	r := rand.New(rand.NewPCG(seed, 7))
	for b := body; len(b) > 0; {
		n := min(len(b), 1+r.IntN(97))
		rnd, b = append(rnd, b[:n]), b[n:]
	}
	for b := body; len(b) > 0; {
		n := min(len(b), 64<<10)
		big, b = append(big, b[:n]), b[n:]
	}
	out["1-byte"], out["random"], out["64KiB"] = ones, rnd, big
	return out
}

// Charge is the charge rule applied to what the reference found, for a
// response with estimate est, cut off or not: final usage on a completed
// response exactly; otherwise input (reported, else est) + max(reported
// output, ⌊Gen/4⌋).
func (r Result) Charge(est int64, cut bool) int64 {
	if r.Final && !cut && !r.Pending && r.Exception == "" {
		return r.Input + r.Output
	}
	in := est
	if r.InputReported {
		in = r.Input
	}
	return in + max(r.Output, r.Gen/4)
}

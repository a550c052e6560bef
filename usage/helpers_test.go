package usage_test

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmrate/llmrate/usage"
	"github.com/stretchr/testify/require"
)

type fixture struct {
	File            string `json:"file"`
	ContentType     string `json:"content_type"`
	ContentEncoding string `json:"content_encoding"`
	Status          int    `json:"status"`
	Input           *int64 `json:"expected_input_tokens"`
	Output          *int64 `json:"expected_output_tokens"`
	Note            string `json:"note"`
}

// fixtureDir is the module's shared corpus of provider bodies.
const fixtureDir = "../testdata/usage"

func loadFixtures(t testing.TB) []fixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtureDir, "manifest.json"))
	require.NoError(t, err)
	var m struct {
		Fixtures []fixture `json:"fixtures"`
	}
	require.NoError(t, json.Unmarshal(raw, &m)) // counts decode into int64, never float64
	require.NotEmpty(t, m.Fixtures)
	return m.Fixtures
}

func readFixture(t testing.TB, f fixture) []byte {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(fixtureDir, f.File))
	require.NoError(t, err)
	return body
}

// splits returns the ways a body is cut into writes: whole, one byte at a
// time, seeded random sizes, and 64 KiB.
func splits(body []byte, seed uint64) map[string][][]byte {
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

func wantUsage(f fixture) (usage.Usage, bool) {
	if f.Input == nil {
		return usage.Usage{}, false
	}
	return usage.Usage{InputTokens: *f.Input, OutputTokens: *f.Output}, true
}

// scan feeds body to a new scanner in writes of split bytes and finishes.
func scan(ct, ce string, body []byte, split int) usage.Result {
	s := usage.NewScanner(ct, ce)
	for len(body) > 0 {
		n := min(len(body), max(split, 1))
		_, _ = s.Write(body[:n])
		body = body[n:]
	}
	return s.Finish()
}

package llmrate_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
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

const fixtureDir = "testdata/usage"

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

func wantUsage(f fixture) (llmrate.Usage, bool) {
	if f.Input == nil {
		return llmrate.Usage{}, false
	}
	return llmrate.Usage{InputTokens: *f.Input, OutputTokens: *f.Output}, true
}

func TestUsageScannerFixtures(t *testing.T) {
	t.Parallel()
	for _, f := range loadFixtures(t) {
		t.Run(f.File, func(t *testing.T) {
			t.Parallel()
			body, err := os.ReadFile(filepath.Join(fixtureDir, f.File))
			require.NoError(t, err)
			want, wantOK := wantUsage(f)
			for name, chunks := range splits(body, uint64(len(body))) {
				if name == "1-byte" && len(body) > 1<<20 {
					continue // the 5 MB stream is cut finely by "random" already
				}
				s := llmrate.NewUsageScanner(f.ContentType, f.ContentEncoding)
				for _, c := range chunks {
					_, _ = s.Write(c)
				}
				got, ok := s.Finish()
				assert.Equal(t, wantOK, ok, "%s: usage reported (%s)", name, f.Note)
				assert.Equal(t, want, got, "%s: usage (%s)", name, f.Note)
			}
		})
	}
}

func TestUsageScannerGzipCopyOnly(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = io.WriteString(zw, `{"usage":{"prompt_tokens":3,"completion_tokens":4}}`)
	require.NoError(t, zw.Close())
	s := llmrate.NewUsageScanner("application/json; charset=utf-8", "gzip")
	_, _ = s.Write(buf.Bytes())
	got, ok := s.Finish()
	require.True(t, ok)
	assert.Equal(t, llmrate.Usage{InputTokens: 3, OutputTokens: 4}, got)
}

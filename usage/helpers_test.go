package usage_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/llmrate/llmrate/internal/usageref"
	"github.com/llmrate/llmrate/usage"
	"github.com/stretchr/testify/require"
)

type fixture = usageref.Fixture

// fixtureDir is the module's shared corpus of provider bodies.
const fixtureDir = "../testdata/usage"

func loadFixtures(t testing.TB) []fixture { return usageref.LoadFixtures(t, fixtureDir) }

var splits = usageref.Splits

func readFixture(t testing.TB, f fixture) []byte {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(fixtureDir, f.File))
	require.NoError(t, err)
	return body
}

func wantUsage(f fixture) (usage.Usage, bool) {
	if f.Input == nil {
		return usage.Usage{}, false
	}
	return usage.Usage{InputTokens: *f.Input, OutputTokens: *f.Output, CachedInputTokens: f.Cached, CacheWriteTokens: f.CacheW, ReasoningTokens: f.Reasoning}, true
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

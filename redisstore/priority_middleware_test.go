package redisstore_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPriorityThreeLimitersOneRedis: three gateway processes (three
// limiters, each on a store of its own) share one Redis; every request
// is on one key, estimated at 100 tokens, against 1,000 tokens per minute
// (a bucket of 2,000). The batch class, with a reserve of one half, is
// admitted exactly 10 requests across the three (2,000 less its floor of
// 1,000), whichever limiter each went to; the default class, which has no
// reserve, then exactly the other 10. Every batch refusal says what the
// reserve kept and for whom.
func TestPriorityThreeLimitersOneRedis(t *testing.T) {
	_, c := redisrig.Start(t)
	figures := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1000}
	tiers := llmrate.TierTable{Free: figures, Developer: figures, Team: figures, Growth: figures, Scale: figures, Enterprise: figures}
	var handlers []http.Handler
	for _, s := range redisrig.Stores(t, c, 3, redisstore.WithClock(frozen)) {
		l, err := llmrate.New(llmrate.WithStore(s), llmrate.WithStoreTimeout(time.Second), llmrate.WithClock(frozen),
			llmrate.WithTiers(tiers), llmrate.WithPriority(llmrate.Header("X-Priority"), map[string]float64{"batch": 0.5}))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, l.Close(context.Background())) })
		handlers = append(handlers, l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	}
	sent := 0
	send := func(class string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(strings.Repeat("x", 400)))
		r.Header.Set("Authorization", "Bearer sk-shared")
		if class != "" {
			r.Header.Set("X-Priority", class)
		}
		w := httptest.NewRecorder()
		handlers[sent%3].ServeHTTP(w, r)
		sent++
		return w
	}
	burst := func(class string) (admitted int, refusals []*httptest.ResponseRecorder) {
		for range 30 {
			w := send(class)
			switch w.Code {
			case http.StatusOK:
				admitted++
			case http.StatusTooManyRequests:
				refusals = append(refusals, w)
			default:
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
		return admitted, refusals
	}
	admitted, refusals := burst("batch")
	assert.Equal(t, 10, admitted, "batch: half of the 2,000-token bucket, across the three limiters")
	for _, w := range refusals {
		var body struct {
			Error struct{ Message string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
		assert.Contains(t, body.Error.Message, "of which 50% is kept for other traffic (priority class batch)")
	}
	admitted, _ = burst("")
	assert.Equal(t, 10, admitted, "the default class: the other half, to the bottom")
	admitted, _ = burst("batch")
	assert.Zero(t, admitted, "nothing left for batch")
}

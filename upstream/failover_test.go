package upstream_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewRejectsBadInput(t *testing.T) {
	ok := bearerKey("a", "sk-a", 10, 100)
	for _, tc := range []struct {
		name string
		keys []upstream.Key
		opts []upstream.Option
		want string
	}{
		{"no keys", nil, nil, "keys: none given"},
		{"empty name", []upstream.Key{bearerKey("", "s", 10, 100)}, nil, "empty name"},
		{"duplicate name", []upstream.Key{ok, bearerKey("a", "sk-b", 10, 100)}, nil, `name "a" is also keys[0]'s`},
		{"nil Authorize", []upstream.Key{{Name: "x", Limits: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}}}, nil, "nil Authorize"},
		{"zero RPM", []upstream.Key{bearerKey("x", "s", 0, 100)}, nil, "RequestsPerMinute 0 out of range"},
		{"TPM too large", []upstream.Key{bearerKey("x", "s", 1, llmrate.MaxPerMinute+1)}, nil, "TokensPerMinute 1000000000001 out of range"},
		{"max attempts 0", []upstream.Key{ok}, []upstream.Option{upstream.WithMaxAttempts(0)}, "WithMaxAttempts: 0: must be at least 1"},
		{"nil base", []upstream.Key{ok}, []upstream.Option{upstream.WithBase(nil)}, "WithBase"},
		{"nil store", []upstream.Key{ok}, []upstream.Option{upstream.WithStore(nil)}, "WithStore"},
		{"nil clock", []upstream.Key{ok}, []upstream.Option{upstream.WithClock(nil)}, "WithClock"},
		{"nil estimator", []upstream.Key{ok}, []upstream.Option{upstream.WithEstimator(nil)}, "WithEstimator"},
		{"zero store timeout", []upstream.Key{ok}, []upstream.Option{upstream.WithStoreTimeout(0)}, "WithStoreTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := upstream.New(tc.keys, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, tr)
			var ce *llmrate.ConfigError
			require.True(t, errors.As(err, &ce), "a *llmrate.ConfigError: %v", err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	tr, err := upstream.New([]upstream.Key{ok, bearerKey("b", "sk-b", 10, 100)})
	require.NoError(t, err)
	assert.NotNil(t, tr)
}

// A provider 429 skips its key until its Retry-After; the request goes to
// the next key, and so do later ones until then.
func TestFailoverOnProvider429(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000), bearerKey("b", "sk-b", 100, 100_000)})
	r.p.on("sk-a", tooMany("Retry-After", "7"))
	resp, body := r.post(t, chat("gpt-4o", 400))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, body, "hello")
	assert.Equal(t, []string{"sk-a", "sk-b"}, r.p.creds())
	assert.Equal(t, []string{"a:provider_429", "b:admitted"}, r.rec.outcomes())
	assert.Equal(t, int64(200-1), r.levels("a")[llmrate.KeyRequests], "a's 429 keeps its request charged")
	assert.Equal(t, int64(200_000-400/4), r.levels("a")[llmrate.KeyTokens], "and its estimate")

	r.p.on("sk-a", nil) // a has room again, but the provider said 7 s
	r.clk.Add(7*time.Second - time.Nanosecond)
	r.post(t, chat("gpt-4o", 400))
	assert.Equal(t, []string{"a:skipped_provider", "b:admitted"}, r.rec.outcomes())
	r.clk.Add(time.Nanosecond)
	r.post(t, chat("gpt-4o", 400))
	assert.Equal(t, []string{"a:admitted"}, r.rec.outcomes())
	assert.Equal(t, []string{"sk-a", "sk-b", "sk-b", "sk-a"}, r.p.creds())
}

// A 429 to a request naming a model skips the key for that model only.
func TestProvider429SkipsPerModel(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000), bearerKey("b", "sk-b", 100, 100_000)})
	r.p.on("sk-a", tooMany("Retry-After", "30"))
	r.post(t, chat("gpt-4o", 400))
	r.p.on("sk-a", nil)
	r.rec.outcomes()
	r.post(t, chat("gpt-4o-mini", 400))
	assert.Equal(t, []string{"a:admitted"}, r.rec.outcomes(), "another model still goes to a")
	r.post(t, chat("gpt-4o", 400))
	assert.Equal(t, []string{"a:skipped_provider", "b:admitted"}, r.rec.outcomes())

	// A request naming no model is skipped on every model.
	r.p.on("sk-a", tooMany("Retry-After", "30"))
	r.post(t, `{"input":"no model here"}`)
	r.p.on("sk-a", nil)
	r.rec.outcomes()
	r.post(t, chat("o3", 400))
	assert.Equal(t, []string{"a:skipped_provider", "b:admitted"}, r.rec.outcomes())
}

// Where a 429 says when the key has room: Retry-After-Ms, Retry-After in
// seconds or as an HTTP-date, else the reset headers of the limits at 0,
// else 1 s.
func TestProvider429RetryTime(t *testing.T) {
	clk := newClock()
	for _, tc := range []struct {
		name    string
		headers []string
		want    time.Duration
	}{
		{"seconds", []string{"Retry-After", "12"}, 12 * time.Second},
		{"milliseconds first", []string{"Retry-After", "12", "Retry-After-Ms", "1500"}, 1500 * time.Millisecond},
		{"HTTP-date", []string{"Retry-After", clk.Now().Add(90 * time.Second).Format(http.TimeFormat)}, 90 * time.Second},
		{"OpenAI reset of the limit at 0", []string{"X-Ratelimit-Remaining-Requests", "3", "X-Ratelimit-Reset-Requests", "2s", "X-Ratelimit-Remaining-Tokens", "0", "X-Ratelimit-Reset-Tokens", "6m0s"}, 6 * time.Minute},
		{"OpenAI reset, none at 0: 1 s", []string{"X-Ratelimit-Remaining-Tokens", "40", "X-Ratelimit-Reset-Tokens", "120ms"}, time.Second},
		{"Anthropic reset", []string{"Anthropic-Ratelimit-Tokens-Remaining", "0", "Anthropic-Ratelimit-Tokens-Reset", clk.Now().Add(42 * time.Second).Format(time.RFC3339)}, 42 * time.Second},
		{"nothing said", nil, time.Second},
		{"unreadable", []string{"Retry-After", "soon"}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000), bearerKey("b", "sk-b", 100, 100_000)})
			r.p.on("sk-a", tooMany(tc.headers...))
			r.post(t, chat("m", 400))
			r.p.on("sk-a", nil)
			r.rec.outcomes()
			r.clk.Add(tc.want - time.Millisecond)
			r.post(t, chat("m", 400))
			assert.Equal(t, []string{"a:skipped_provider", "b:admitted"}, r.rec.outcomes(), "just before")
			r.clk.Add(time.Millisecond)
			r.post(t, chat("m", 400))
			assert.Equal(t, []string{"a:admitted"}, r.rec.outcomes(), "at the time said")
		})
	}
}

// A response saying 0 remaining skips its key until the reset, for later
// requests, before the provider refuses one.
func TestZeroRemainingSkipsUntilReset(t *testing.T) {
	clk := newClock()
	for _, tc := range []struct {
		name    string
		headers []string
		want    time.Duration
	}{
		{"OpenAI requests", []string{"X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", "1.5s", "X-Ratelimit-Remaining-Tokens", "9000", "X-Ratelimit-Reset-Tokens", "20ms"}, 1500 * time.Millisecond},
		{"OpenAI tokens", []string{"X-Ratelimit-Remaining-Tokens", "0", "X-Ratelimit-Reset-Tokens", "1m2.25s"}, 62250 * time.Millisecond},
		{"Anthropic requests", []string{"Anthropic-Ratelimit-Requests-Remaining", "0", "Anthropic-Ratelimit-Requests-Reset", clk.Now().Add(20 * time.Second).Format(time.RFC3339)}, 20 * time.Second},
		{"Anthropic output tokens", []string{"Anthropic-Ratelimit-Output-Tokens-Remaining", "0", "Anthropic-Ratelimit-Output-Tokens-Reset", clk.Now().Add(3 * time.Second).Format(time.RFC3339),
			"Anthropic-Ratelimit-Input-Tokens-Remaining", "100", "Anthropic-Ratelimit-Input-Tokens-Reset", clk.Now().Add(50 * time.Second).Format(time.RFC3339)}, 3 * time.Second},
		{"0 without a reset", []string{"X-Ratelimit-Remaining-Requests", "0"}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000), bearerKey("b", "sk-b", 100, 100_000)})
			r.p.on("sk-a", withHeaders(openAIJSON(10, 5, "hi"), tc.headers...))
			resp, body := r.post(t, chat("m", 400))
			require.Equal(t, http.StatusOK, resp.StatusCode, "this response is the client's")
			assert.Contains(t, body, "hi")
			assert.Equal(t, []string{"a:admitted"}, r.rec.outcomes())
			r.p.on("sk-a", nil)
			r.clk.Add(tc.want - time.Millisecond)
			r.post(t, chat("m", 400))
			assert.Equal(t, []string{"a:skipped_provider", "b:admitted"}, r.rec.outcomes(), "just before the reset")
			r.clk.Add(time.Millisecond)
			r.post(t, chat("m", 400))
			assert.Equal(t, []string{"a:admitted"}, r.rec.outcomes(), "at the reset")
		})
	}
}

// Headers that say there is room skip nothing.
func TestRemainingHeadersWithRoomSkipNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000), bearerKey("b", "sk-b", 100, 100_000)})
	r.p.on("sk-a", withHeaders(openAIJSON(10, 5, "hi"), "X-Ratelimit-Remaining-Requests", "1", "X-Ratelimit-Reset-Requests", "6m0s"))
	r.post(t, chat("m", 400))
	r.post(t, chat("m", 400))
	assert.Equal(t, []string{"a:admitted", "a:admitted"}, r.rec.outcomes())
}

// At most WithMaxAttempts attempts reach a provider; when the last gets a
// 429, that 429 is what the caller gets, as sent.
func TestMaxAttempts(t *testing.T) {
	t.Parallel()
	var keys []upstream.Key
	for _, n := range []string{"a", "b", "c", "d"} {
		keys = append(keys, bearerKey(n, "sk-"+n, 100, 100_000))
	}
	r := newRig(t, keys, upstream.WithMaxAttempts(2))
	for _, n := range []string{"a", "b", "c", "d"} {
		r.p.on("sk-"+n, tooMany("Retry-After", "9", "X-Provider-Says", n))
	}
	resp, body := r.post(t, chat("m", 400))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "b", resp.Header.Get("X-Provider-Says"), "the last attempt's 429")
	assert.Equal(t, "9", resp.Header.Get("Retry-After"))
	assert.Equal(t, `{"error":{"message":"provider says slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, body)
	assert.Equal(t, []string{"sk-a", "sk-b"}, r.p.creds())
	assert.Equal(t, []string{"a:provider_429", "b:provider_429"}, r.rec.outcomes())
}

// The default is 3 attempts.
func TestMaxAttemptsDefault(t *testing.T) {
	t.Parallel()
	var keys []upstream.Key
	for _, n := range []string{"a", "b", "c", "d"} {
		keys = append(keys, bearerKey(n, "sk-"+n, 100, 100_000))
	}
	r := newRig(t, keys)
	for _, n := range []string{"a", "b", "c", "d"} {
		r.p.on("sk-"+n, tooMany())
	}
	resp, _ := r.post(t, chat("m", 400))
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, []string{"sk-a", "sk-b", "sk-c"}, r.p.creds())
}

// A key its own buckets refuse is skipped without counting as an attempt
// and without anything sent on it.
func TestOwnLimitSkipIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 2, 100_000), bearerKey("b", "sk-b", 100, 100_000), bearerKey("c", "sk-c", 100, 100_000)},
		upstream.WithMaxAttempts(1))
	r.post(t, chat("m", 400))
	r.post(t, chat("m", 400)) // a's 2 per minute are spent (1×, as the provider's bucket)
	r.rec.outcomes()
	r.p.on("sk-b", tooMany())
	resp, _ := r.post(t, chat("m", 400))
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "b's 429 was the one attempt allowed")
	assert.Equal(t, []string{"a:skipped_own_limit", "b:provider_429"}, r.rec.outcomes())
	assert.Equal(t, []string{"sk-a", "sk-a", "sk-b"}, r.p.creds())
}

// When no key can take the request, the 429 is synthesized: llmrate's
// envelope, Retry-After the whole seconds until the soonest key has room.
func TestNoKeyCanTakeTheRequest(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000), bearerKey("b", "sk-b", 100, 100_000)})
	r.p.on("sk-a", tooMany("Retry-After", "50"))
	r.p.on("sk-b", tooMany("Retry-After", "20", "X-Provider-Says", "b"))
	resp, _ := r.post(t, chat("m", 400))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "b", resp.Header.Get("X-Provider-Says"), "the last attempt's 429, as sent")
	assert.Equal(t, []string{"a:provider_429", "b:provider_429"}, r.rec.outcomes())
	r.p.on("sk-a", nil)
	r.p.on("sk-b", nil)

	r.clk.Add(15 * time.Second) // a: 35 s left, b: 5 s
	resp, body := r.post(t, chat("m", 400))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, []string{"a:skipped_provider", "b:skipped_provider"}, r.rec.outcomes())
	assert.Len(t, r.p.calls(), 2, "nothing more was sent")
	assert.Equal(t, "5", resp.Header.Get("Retry-After"))
	assert.Empty(t, resp.Header.Get("X-Should-Retry"))
	assert.Empty(t, resp.Header.Get("X-Provider-Says"))
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.Regexp(t, `^req_[0-9a-f]{32}$`, resp.Header.Get("X-Request-Id"))
	var env struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &env))
	assert.Equal(t, "rate_limit_error", env.Error.Type)
	assert.Equal(t, "rate_limit_exceeded", env.Error.Code)
	assert.Nil(t, env.Error.Param)
	assert.Contains(t, env.Error.Message, "try again in 5s")
	assert.Contains(t, env.Error.Message, "the provider's rate limit", "the provider said so, not a meter of ours")
	assert.Contains(t, body, `"param":null`)

	r.clk.Add(5 * time.Second)
	resp, _ = r.post(t, chat("m", 400))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{"a:skipped_provider", "b:admitted"}, r.rec.outcomes())
}

// A provider's skip past a minute is relayed as the honest wait, not
// clamped to 60, with X-Should-Retry: false so the SDKs hand it to the
// caller; at 60 s or less, the flag is absent.
func TestProviderSkipPastAMinute(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000)})
	r.p.on("sk-a", tooMany("Retry-After", "3600"))
	at := r.clk.Now()
	resp, _ := r.post(t, chat("m", 400))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "3600", resp.Header.Get("Retry-After"), "the provider's own 429, as sent")
	r.p.on("sk-a", nil)

	for _, tc := range []struct {
		after      time.Duration
		retryAfter string
		should     string
	}{
		{0, "3600", "false"},
		{3539 * time.Second, "61", "false"},
		{3539*time.Second + 500*time.Millisecond, "61", "false"}, // 60.5 s: rounded up, past 60
		{3540 * time.Second, "60", ""},
		{3599 * time.Second, "1", ""},
	} {
		r.clk.Add(at.Add(tc.after).Sub(r.clk.Now())) // tc.after past the 429
		resp, body := r.post(t, chat("m", 400))
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%v after", tc.after)
		assert.Equal(t, tc.retryAfter, resp.Header.Get("Retry-After"), "%v after", tc.after)
		assert.Equal(t, tc.should, resp.Header.Get("X-Should-Retry"), "%v after", tc.after)
		assert.Contains(t, body, "try again in "+tc.retryAfter+"s")
	}
	assert.Len(t, r.p.calls(), 1, "nothing more was sent")
}

// The synthesized 429's Retry-After is the deficit of the key that has room
// soonest over its refill rate, rounded up.
func TestSynthesizedRetryAfterFromBuckets(t *testing.T) {
	t.Parallel()
	// a: 1,200 TPM = 20 tokens/s, capacity 1,200 (1×, as the provider's
	// bucket); b: 240 TPM = 4 tokens/s, capacity 240.
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 1200), bearerKey("b", "sk-b", 100, 240)})
	r.p.on("sk-a", openAIJSON(1000, 150, "x")) // a keeps 1,200 - 1,150 = 50
	r.post(t, chat("m", 800))                  // estimate 200
	r.p.on("sk-b", openAIJSON(200, 30, "y"))   // b keeps 240 - 230 = 10
	r.post(t, chat("m", 800))                  // a: 50 < 200, so b
	r.rec.outcomes()
	// 200 more: a needs (200 - 50) / 20 = 7.5 s; b needs (200 - 10) / 4 = 47.5 s.
	resp, _ := r.post(t, chat("m", 800))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "8", resp.Header.Get("Retry-After"))
	assert.Equal(t, []string{"a:skipped_own_limit", "b:skipped_own_limit"}, r.rec.outcomes())
	_, body := r.post(t, chat("m", 800))
	assert.Contains(t, body, "Rate limit reached for tokens per minute", "the meter and window of the key with room soonest")
	assert.Contains(t, body, "limit 1200 per minute")
	r.rec.outcomes()
	r.clk.Add(7 * time.Second) // a needs 0.5 s more: rounded up to 1
	resp, _ = r.post(t, chat("m", 800))
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Len(t, r.p.calls(), 2, "nothing was sent")
}

// A request larger than every key's whole bucket: 429, Retry-After 60, a
// message that retrying will not help, X-Should-Retry: false.
func TestNeverFits(t *testing.T) {
	t.Parallel()
	// A key's buckets hold 1× its per-minute figures, as the provider's do:
	// 401 tokens exceed b's 400 per minute, though not twice it.
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100), bearerKey("b", "sk-b", 100, 400)})
	resp, body := r.post(t, chat("m", 4*401))
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "60", resp.Header.Get("Retry-After"))
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	assert.Contains(t, body, "Retrying will not help")
	assert.Contains(t, body, `"code":"rate_limit_exceeded"`)
	assert.Empty(t, r.p.calls())
	assert.Equal(t, []string{"a:skipped_own_limit", "b:skipped_own_limit"}, r.rec.outcomes())

	// 400 fits b exactly.
	resp, _ = r.post(t, chat("m", 4*400))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// A key the request can never fit is ignored in the Retry-After.
func TestNeverFitsKeyIgnoredInRetryAfter(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("small", "sk-s", 100, 10), bearerKey("big", "sk-b", 100, 1200)})
	r.p.on("sk-b", openAIJSON(1190, 0, "")) // big keeps 10
	r.post(t, chat("m", 400))               // estimate 100: too big for small
	r.rec.outcomes()
	resp, _ := r.post(t, chat("m", 400)) // big needs (100 - 10) / 20 = 4.5 s
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "5", resp.Header.Get("Retry-After"))
	assert.Empty(t, resp.Header.Get("X-Should-Retry"))
}

// A request body is replayed byte for byte on the next key.
func TestBodyReplayedOnFailover(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 10_000_000), bearerKey("b", "sk-b", 100, 10_000_000)})
	r.p.on("sk-a", tooMany())
	body := chat("m", upstream.MaxReplayBody) // at the bound: buffered
	// No GetBody: a plain reader, sent chunked.
	req, err := http.NewRequest(http.MethodPost, r.p.srv.URL, io.NopCloser(strings.NewReader(body)))
	require.NoError(t, err)
	require.Nil(t, req.GetBody)
	resp, err := r.client().Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	calls := r.p.calls()
	require.Len(t, calls, 2)
	assert.Equal(t, body, string(calls[0].Body))
	assert.Equal(t, body, string(calls[1].Body))
	assert.Equal(t, []string{"a:provider_429", "b:admitted"}, r.rec.outcomes())
}

// A body over the bound without GetBody is sent once: the provider's 429
// to it is returned as sent. With GetBody, it is replayed.
func TestLargeBody(t *testing.T) {
	t.Parallel()
	body := chat("m", upstream.MaxReplayBody+100)
	for _, getBody := range []bool{false, true} {
		// The base does not rewind bodies itself (net/http's may, from
		// GetBody): each attempt's body is the Transport's own doing.
		noRewind := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			out := req.Clone(req.Context())
			out.GetBody = nil
			return http.DefaultTransport.RoundTrip(out)
		})
		r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 10_000_000), bearerKey("b", "sk-b", 100, 10_000_000)}, upstream.WithBase(noRewind))
		r.p.on("sk-a", tooMany("X-Provider-Says", "a"))
		var rc io.Reader = strings.NewReader(body)
		if !getBody {
			rc = io.NopCloser(rc) // NewRequest sets GetBody only for the types it knows
		}
		req, err := http.NewRequest(http.MethodPost, r.p.srv.URL, rc)
		require.NoError(t, err)
		require.Equal(t, getBody, req.GetBody != nil)
		resp, err := r.client().Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		calls := r.p.calls()
		if !getBody {
			assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			assert.Equal(t, "a", resp.Header.Get("X-Provider-Says"))
			require.Len(t, calls, 1)
			assert.Equal(t, body, string(calls[0].Body))
			assert.Equal(t, []string{"a:provider_429"}, r.rec.outcomes())
			continue
		}
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		require.Len(t, calls, 2)
		assert.Equal(t, body, string(calls[0].Body))
		assert.Equal(t, body, string(calls[1].Body))
	}
}

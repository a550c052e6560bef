package llmrate_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Figures for the trailer tests, small enough to work by hand: the
// workspace holds 20 requests and 2,000 tokens, each key 10 and 1,200.
var (
	trailerTiers    = llmrate.TierTable{Free: llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 1000}, Developer: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}, Team: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}, Growth: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}, Scale: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}, Enterprise: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}}
	trailerKeyTiers = llmrate.TierTable{Free: llmrate.Limits{RequestsPerMinute: 5, TokensPerMinute: 600}, Developer: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}, Team: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}, Growth: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}, Scale: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}, Enterprise: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1}}
)

var trailerNames = []string{
	llmrate.TrailerRemainingKeyRequests, llmrate.TrailerRemainingKeyTokens,
	llmrate.TrailerRemainingWorkspaceRequests, llmrate.TrailerRemainingWorkspaceTokens,
}

// sseUsage is an OpenAI chat stream, flushed event by event, whose last
// chunk reports the given usage.
func sseUsage(prompt, completion int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, word := range []string{"Hel", "lo"} {
			_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"`+word+`"}}]}`+"\n\n")
			http.NewResponseController(w).Flush()
		}
		_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":`+
			strconv.Itoa(prompt)+`,"completion_tokens":`+strconv.Itoa(completion)+`,"total_tokens":`+strconv.Itoa(prompt+completion)+"}}\n\ndata: [DONE]\n\n")
	}
}

func trailerLimiter(t *testing.T, next http.Handler, opts ...llmrate.Option) http.Handler {
	t.Helper()
	clock := newFakeClock()
	base := []llmrate.Option{
		llmrate.WithClock(clock.Now), llmrate.WithTiers(trailerTiers), llmrate.WithKeyTiers(trailerKeyTiers),
		llmrate.WithWorkspace(llmrate.Header("X-Workspace")),
	}
	l, err := llmrate.New(append(base, opts...)...)
	require.NoError(t, err)
	return l.Middleware(next)
}

// postTrailers sends a 400-byte body (estimate 100 tokens) for key in workspace
// ws and reads the whole response, trailers included.
func postTrailers(t *testing.T, c *http.Client, url, key, ws string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(strings.Repeat("x", 400)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("X-Workspace", ws)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

func trailerFigures(resp *http.Response) map[string]string {
	got := map[string]string{}
	for _, k := range trailerNames {
		if v, ok := resp.Trailer[k]; ok {
			got[k] = strings.Join(v, ",")
		}
	}
	return got
}

// Worked by hand. Request 1 (key k1): admission debits 1 request and the
// estimate 400/4 = 100 tokens from full buckets; the stream reports
// 300 + 250 = 550, so the tokens buckets end 550 below full:
//
//	key:       requests 10-1 = 9,  tokens 1200-550 = 650
//	workspace: requests 20-1 = 19, tokens 2000-550 = 1450
//
// Request 2 (key k2, same workspace) reports 40 + 20 = 60, less than its
// estimate of 100: its key is at 10-1 = 9 and 1200-60 = 1140; the
// workspace at 20-2 = 18 and 1450-60 = 1390.
var trailerUsage = map[string][2]int{"Bearer k1": {300, 250}, "Bearer k2": {40, 20}}

var trailerWant = []map[string]string{
	{llmrate.TrailerRemainingKeyRequests: "9", llmrate.TrailerRemainingKeyTokens: "650", llmrate.TrailerRemainingWorkspaceRequests: "19", llmrate.TrailerRemainingWorkspaceTokens: "1450"},
	{llmrate.TrailerRemainingKeyRequests: "9", llmrate.TrailerRemainingKeyTokens: "1140", llmrate.TrailerRemainingWorkspaceRequests: "18", llmrate.TrailerRemainingWorkspaceTokens: "1390"},
}

func TestTrailersHTTP1Chunked(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(trailerLimiter(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u := trailerUsage[r.Header.Get("Authorization")]
		sseUsage(u[0], u[1])(w, r)
	}), llmrate.WithRateLimitTrailers()))
	defer srv.Close()
	for n, key := range []string{"k1", "k2"} {
		resp, body := postTrailers(t, srv.Client(), srv.URL, key, "ws")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, 1, resp.ProtoMajor)
		assert.Equal(t, []string{"chunked"}, resp.TransferEncoding)
		assert.Contains(t, body, `"content":"Hel"`, "the body passes unchanged")
		assert.True(t, strings.HasSuffix(body, "data: [DONE]\n\n"), body)
		assert.Equal(t, trailerWant[n], trailerFigures(resp), "request %d", n+1)
		for _, k := range trailerNames {
			assert.Empty(t, resp.Header.Get(k), "%s is a trailer, never a header", k)
		}
	}
}

func TestTrailersHTTP2(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(trailerLimiter(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer k2" { // HTTP/2 carries trailers after a declared length too
			body := `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":20,"total_tokens":60}}`
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			_, _ = io.WriteString(w, body)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		sseUsage(300, 250)(w, r)
	}), llmrate.WithRateLimitTrailers()))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	for n, key := range []string{"k1", "k2"} {
		resp, body := postTrailers(t, srv.Client(), srv.URL, key, "ws")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, 2, resp.ProtoMajor, "the test must run over HTTP/2")
		assert.Contains(t, body, "usage")
		assert.Equal(t, trailerWant[n], trailerFigures(resp), "request %d", n+1)
	}
}

// An HTTP/1.1 response with a Content-Length cannot carry trailers: none
// are declared, and the handler's framing is kept.
func TestTrailersHTTP1ContentLength(t *testing.T) {
	t.Parallel()
	const body = `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":300,"completion_tokens":250,"total_tokens":550}}`
	srv := httptest.NewServer(trailerLimiter(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = io.WriteString(w, body)
	}), llmrate.WithRateLimitTrailers()))
	defer srv.Close()
	resp, got := postTrailers(t, srv.Client(), srv.URL, "k", "ws")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, body, got)
	assert.Equal(t, int64(len(body)), resp.ContentLength)
	assert.Empty(t, resp.TransferEncoding)
	assert.Empty(t, resp.Trailer, "none declared, none sent")
}

// Responses without a body, the provider's own 429 and a limiter without
// the option get no trailers.
func TestTrailersNotSent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		code   int
		method string
		opts   []llmrate.Option
	}{
		{"provider 429", http.StatusTooManyRequests, http.MethodPost, []llmrate.Option{llmrate.WithRateLimitTrailers()}},
		{"204", http.StatusNoContent, http.MethodPost, []llmrate.Option{llmrate.WithRateLimitTrailers()}},
		{"HEAD", http.StatusOK, http.MethodHead, []llmrate.Option{llmrate.WithRateLimitTrailers()}},
		{"option off", http.StatusOK, http.MethodPost, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(trailerLimiter(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After", "7")
				w.WriteHeader(tc.code)
				if tc.code != http.StatusNoContent {
					_, _ = io.WriteString(w, `{"error":{"message":"slow down"}}`)
					http.NewResponseController(w).Flush() // chunked: trailers could ride
				}
			}), tc.opts...))
			defer srv.Close()
			req, err := http.NewRequest(tc.method, srv.URL, strings.NewReader("body"))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer k")
			req.Header.Set("X-Workspace", "ws")
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			_, err = io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, tc.code, resp.StatusCode)
			assert.Empty(t, resp.Trailer, "none declared, none sent")
			if tc.code == http.StatusTooManyRequests {
				assert.Equal(t, "7", resp.Header.Get("Retry-After"), "the provider's 429 is relayed untouched")
			}
		})
	}
}

// The trailers are the same in every header style; HeadersNone still
// leaves the upstream's own headers in place.
func TestTrailersEveryHeaderStyle(t *testing.T) {
	t.Parallel()
	for _, style := range []llmrate.HeaderStyle{llmrate.HeadersNone, llmrate.HeadersOpenAI, llmrate.HeadersIETF} {
		srv := httptest.NewServer(trailerLimiter(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(llmrate.HeaderRemainingTokens, "upstream")
			sseUsage(300, 250)(w, r)
		}), llmrate.WithRateLimitTrailers(), llmrate.WithRateLimitHeaders(style)))
		resp, _ := postTrailers(t, srv.Client(), srv.URL, "k1", "ws")
		srv.Close()
		assert.Equal(t, trailerWant[0], trailerFigures(resp), "style %d", style)
		switch style {
		case llmrate.HeadersNone:
			assert.Equal(t, "upstream", resp.Header.Get(llmrate.HeaderRemainingTokens))
		case llmrate.HeadersOpenAI:
			// The header is the admission's view (estimate 100 debited from
			// the binding key bucket); the trailer the reconciled one.
			assert.Equal(t, "1100", resp.Header.Get(llmrate.HeaderRemainingTokens))
		}
	}
}

// A response that reports no usage is charged its estimate: the trailers
// then show the admission's levels.
func TestTrailersEstimateStands(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(trailerLimiter(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"error":{"message":"bad request"}}`)
		http.NewResponseController(w).Flush()
	}), llmrate.WithRateLimitTrailers()))
	defer srv.Close()
	resp, _ := postTrailers(t, srv.Client(), srv.URL, "k1", "ws")
	assert.Equal(t, map[string]string{
		llmrate.TrailerRemainingKeyRequests: "9", llmrate.TrailerRemainingKeyTokens: "1100",
		llmrate.TrailerRemainingWorkspaceRequests: "19", llmrate.TrailerRemainingWorkspaceTokens: "1900",
	}, trailerFigures(resp))
}

// A stream's trailers show the buckets after its reported usage (20 + 30
// tokens) replaced the admission's estimate: 400,000 - 50 tokens left of
// the Free tier's 400,000, and 199 of 200 requests.
func ExampleWithRateLimitTrailers() {
	lim, err := llmrate.New(llmrate.WithClock(exampleNow), llmrate.WithRateLimitTrailers())
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(lim.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n")
		http.NewResponseController(w).Flush()
		_, _ = io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":30}}\n\ndata: [DONE]\n\n")
	})))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","stream":true}`))
	req.Header.Set("Authorization", "Bearer sk-demo")
	resp, err := srv.Client().Do(req)
	if err != nil {
		panic(err)
	}
	var declared []string // announced in the Trailer header; values still empty
	for k := range resp.Trailer {
		declared = append(declared, k)
	}
	sort.Strings(declared)
	_, _ = io.Copy(io.Discard, resp.Body) // trailers arrive after the body
	_ = resp.Body.Close()
	fmt.Println("declared:", strings.Join(declared, ", "))
	fmt.Println("key tokens:", resp.Trailer.Get(llmrate.TrailerRemainingKeyTokens))
	fmt.Println("workspace requests:", resp.Trailer.Get(llmrate.TrailerRemainingWorkspaceRequests))
	// Output:
	// declared: X-Ratelimit-Remaining-Requests-Key, X-Ratelimit-Remaining-Requests-Workspace, X-Ratelimit-Remaining-Tokens-Key, X-Ratelimit-Remaining-Tokens-Workspace
	// key tokens: 399950
	// workspace requests: 199
}

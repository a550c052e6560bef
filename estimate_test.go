package llmrate_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refEstimate is EstimateFromBody's rule computed with encoding/json,
// independently of llmrate's scanner: the body decoded into Go values
// (duplicate members: the last wins; strings decoded, invalid UTF-8 as
// U+FFFD), the listed text members' string bytes summed, ⌈text / 4⌉ plus
// the largest output limit that strconv.ParseInt reads as a non-negative
// int64, at least 1. A body that is not one valid JSON object within
// MaxModelBody bytes estimates as EstimateTokens does.
func refEstimate(body []byte, contentLength int64) int64 {
	fallback := max(1, contentLength/4)
	if len(body) > llmrate.MaxModelBody || !json.Valid(body) {
		return fallback
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return fallback
	}
	top, ok := v.(map[string]any)
	if !ok {
		return fallback
	}
	str := func(x any) int64 {
		s, _ := x.(string)
		return int64(len(s))
	}
	field := func(x any, name string) any {
		m, _ := x.(map[string]any)
		return m[name]
	}
	each := func(x any, f func(any) int64) int64 {
		a, _ := x.([]any)
		var n int64
		for _, e := range a {
			n += f(e)
		}
		return n
	}
	parts := func(x any) int64 { // a string, or the "text" of an array's objects
		return str(x) + each(x, func(e any) int64 { return str(field(e, "text")) })
	}
	items := func(x any) int64 { // a string, or the content of an array's objects
		return str(x) + each(x, func(e any) int64 { return parts(field(e, "content")) })
	}
	gemini := func(x any) int64 { return parts(field(x, "parts")) }
	text := items(top["messages"]) + items(top["input"]) + parts(top["system"]) + str(top["instructions"]) +
		str(top["prompt"]) + each(top["prompt"], str) + each(top["contents"], gemini) + gemini(top["systemInstruction"])
	var out int64
	for _, x := range []any{top["max_tokens"], top["max_completion_tokens"], top["max_output_tokens"], field(top["generationConfig"], "maxOutputTokens")} {
		if n, ok := x.(json.Number); ok {
			if i, err := strconv.ParseInt(string(n), 10, 64); err == nil && i >= 0 {
				out = max(out, i)
			}
		}
	}
	est := (text + 3) / 4
	if out > 1<<63-1-est {
		return 1<<63 - 1
	}
	return max(1, est+out)
}

func TestEstimateFromBody(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", llmrate.MaxModelBody)
	cases := []struct {
		name, body string
		want       int64 // worked by hand
	}{
		{"chat, string content", `{"model":"gpt-4o","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}]}`, 5},      // 9+11=20 → 5
		{"chat, parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"abcde"},{"type":"image_url","image_url":{"url":"data:xyz"}}]}]}`, 2}, // 5 → 2
		{"max_tokens added", `{"messages":[{"role":"user","content":"abcdefgh"}],"max_tokens":100}`, 102},                                                   // 8 → 2, + 100
		{"the largest output limit", `{"messages":[],"max_tokens":10,"max_completion_tokens":300,"max_output_tokens":20}`, 300},
		{"anthropic", `{"model":"claude","system":[{"type":"text","text":"abcd"}],"messages":[{"role":"user","content":[{"type":"text","text":"efgh"}]}],"max_tokens":1024}`, 1026},  // 8 → 2
		{"anthropic, system string", `{"system":"abcdefghijkl","messages":[],"max_tokens":1}`, 4},                                                                                    // 12 → 3, +1
		{"responses", `{"instructions":"abcd","input":[{"role":"user","content":[{"type":"input_text","text":"efgh"}]},{"role":"user","content":"ij"}],"max_output_tokens":50}`, 53}, // 10 → 3
		{"responses, input string", `{"input":"abcdefghi"}`, 3},
		{"legacy prompt", `{"prompt":"abcdefgh","max_tokens":16}`, 18},
		{"legacy prompt array", `{"prompt":["abcd","efgh",3]}`, 2},
		{"gemini", `{"systemInstruction":{"parts":[{"text":"abcd"}]},"contents":[{"role":"user","parts":[{"text":"efgh"},{"inlineData":{"data":"xxxx"}}]}],"generationConfig":{"maxOutputTokens":64}}`, 66},
		{"decoded bytes: escapes", `{"prompt":"\u00e9\ud83d\ude00\n"}`, 2}, // é 2 + 😀 4 + \n 1 = 7 → 2
		{"decoded bytes: lone surrogate", `{"prompt":"\ud800\ud800x"}`, 2}, // U+FFFD twice (6) + 1 = 7 → 2
		{"decoded bytes: invalid UTF-8", "{\"prompt\":\"\xff\xfe\"}", 2},   // U+FFFD twice = 6 → 2
		{"duplicates: the last counts", `{"prompt":"abcdefghijklmnop","prompt":"ab","max_tokens":1000,"max_tokens":5}`, 6},
		{"escaped member name", `{"m\u0061x_tokens":7,"pr\u006fmpt":"abcd"}`, 8},
		{"names are exact", `{"Max_Tokens":700,"Prompt":"abcdefgh","prompt":"a"}`, 1},
		{"invalid limits ignored", `{"prompt":"abcd","max_tokens":-5,"max_completion_tokens":1.5,"max_output_tokens":"9","generationConfig":{"maxOutputTokens":2e3}}`, 1},
		{"limit above int64", `{"max_tokens":9223372036854775808,"max_completion_tokens":12}`, 12},
		{"-0 is 0", `{"prompt":"abcd","max_tokens":-0}`, 1},
		{"saturates", `{"prompt":"abcd","max_tokens":9223372036854775807}`, 1<<63 - 1},
		{"nothing counted", `{"model":"gpt-4o","temperature":0.2}`, 1},
		{"nested look-alikes do not count", `{"metadata":{"prompt":"abcdefgh","max_tokens":99},"tools":[{"messages":"abcdefgh"}]}`, 1},
		{"not JSON: Content-Length / 4", `prompt=abcdefghijklmnopqrstuvwxyz`, 8},
		{"trailing garbage: Content-Length / 4", `{"prompt":"a"} x`, 4},
		{"array: Content-Length / 4", `[{"prompt":"abcdefgh"}]`, 5},
		{"above the bound: Content-Length / 4", `{"prompt":"` + big + `"}`, int64(len(big)+13) / 4},
	}
	for _, c := range cases {
		body := []byte(c.body)
		require.Equal(t, c.want, refEstimate(body, int64(len(body))), "the reference agrees with the hand-worked %s", c.name)
		r := bodyRequest("/v1/chat/completions", body, false, 1000)
		assert.Equal(t, c.want, llmrate.EstimateFromBody()(r), "EstimateFromBody: %s", c.name)
		rest, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(body, rest), "%s: the body is still whole", c.name)
	}
}

// Without a declared length, a body that is not valid JSON estimates at 1
// (EstimateTokens's floor), and a valid one as declared.
func TestEstimateFromBodyChunked(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]int64{`{"prompt":"abcdefgh","max_tokens":3}`: 5, `not json at all, long enough`: 1, ``: 1} {
		r := bodyRequest("/v1/completions", []byte(body), true, 3)
		assert.Equal(t, want, llmrate.EstimateFromBody()(r), "chunked %q", body)
		rest, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		assert.Equal(t, body, string(rest))
	}
	r := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
	assert.Equal(t, int64(1), llmrate.EstimateFromBody()(r), "no body")
}

// A body that fails mid-read estimates as EstimateTokens does, and the next
// handler sees the bytes read before the failure, then the same error.
func TestEstimateFromBodyReadError(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Body = io.NopCloser(io.MultiReader(strings.NewReader(`{"prompt":"abcd",`), errorReader{io.ErrUnexpectedEOF}))
	r.ContentLength = 400
	assert.Equal(t, int64(100), llmrate.EstimateFromBody()(r))
	rest, err := io.ReadAll(r.Body)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Equal(t, `{"prompt":"abcd",`, string(rest))
}

// With ModelFromBody and EstimateFromBody on one request, in either order,
// both find what they read alone, and the next handler still reads the
// whole body (that the second reuses the first's read-ahead is shown by
// TestEstimateFromBodyAllocs).
func TestEstimateFromBodyWithModelFromBody(t *testing.T) {
	t.Parallel()
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("abcd", 1000) + `"}],"max_tokens":2000}`
	for _, modelFirst := range []bool{true, false} {
		r := bodyRequest("/v1/chat/completions", []byte(body), false, 512)
		var m string
		var est int64
		if modelFirst {
			m, _ = llmrate.ModelFromBody()(r)
			est = llmrate.EstimateFromBody()(r)
		} else {
			est = llmrate.EstimateFromBody()(r)
			m, _ = llmrate.ModelFromBody()(r)
		}
		assert.Equal(t, "gpt-4o", m)
		assert.Equal(t, int64(1000+2000), est)
		rest, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		assert.Equal(t, body, string(rest))
	}
}

// Through the middleware and a ReverseProxy: the decision's estimate is
// EstimateFromBody's, and the upstream gets every byte with its
// Content-Length.
func TestEstimateFromBodyMiddleware(t *testing.T) {
	t.Parallel()
	var got []byte
	var gotLen int64
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		gotLen = r.ContentLength
	})
	for _, withModel := range []bool{false, true} {
		rec := &recorder{}
		opts := []llmrate.Option{llmrate.WithEstimator(llmrate.EstimateFromBody()), llmrate.WithObserver(rec)}
		if withModel {
			opts = append(opts, llmrate.WithModel(llmrate.ModelFromBody()),
				llmrate.WithModelLimits(llmrate.ModelLimits{"gpt-4o": uniform(llmrate.Limits{RequestsPerMinute: 10, TokensPerMinute: 100_000})}))
		}
		h := newHarness(t, next, opts...)
		body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("héllo ", 700) + `"}],"max_tokens":2500}`
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer sk-est")
		w := httptest.NewRecorder()
		h.h.ServeHTTP(w, r)
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, body, string(got))
		assert.Equal(t, int64(len(body)), gotLen)
		require.Len(t, rec.decisions, 1)
		assert.Equal(t, int64((7*700+3)/4+2500), rec.decisions[0].Estimate, "⌈4900/4⌉ + 2500")
		if withModel {
			assert.Equal(t, "gpt-4o", rec.decisions[0].Model)
		}
	}
}

// EstimateFromBody allocates nothing beyond the read-ahead (the buffer and
// the body that replays it), however its strings and names are written.
func TestEstimateFromBodyAllocs(t *testing.T) {
	body := []byte(`{"model":"gpt-4o","m\u0065ssages":[{"role":"system","content":"caf\u00e9 \ud83d\ude00 \ud800 ` + "\xff" + `"},` +
		`{"role":"user","content":[{"type":"text","text":"` + strings.Repeat("lorem ipsum ", 300) + `"}]}],"max_tokens":512,"generationConfig":{"maxOutputTokens":9}}`)
	want := refEstimate(body, int64(len(body)))
	rd := bytes.NewReader(body)
	rc := io.NopCloser(rd)
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	estimate, model := llmrate.EstimateFromBody(), llmrate.ModelFromBody()
	run := func(withModel bool) float64 {
		return testing.AllocsPerRun(100, func() {
			rd.Reset(body)
			r.Body, r.ContentLength = rc, int64(len(body))
			if withModel {
				if m, _ := model(r); m != "gpt-4o" {
					t.Fatalf("model %q", m)
				}
			}
			if got := estimate(r); got != want {
				t.Fatalf("estimate %d, want %d", got, want)
			}
		})
	}
	// The read-ahead is two allocations: its buffer and the body that
	// replays it.
	assert.Equal(t, 2.0, run(false), "allocations per estimate")
	// With ModelFromBody first, one more: the model's string. A second
	// read-ahead would be two more.
	assert.Equal(t, 3.0, run(true), "allocations per model and estimate")
}

// FuzzEstimateFromBody: EstimateFromBody is refEstimate (encoding/json) on
// any body, declared or chunked, whatever the read sizes, and the next
// handler reads the very bytes the client sent.
func FuzzEstimateFromBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":20}`,
		`{"system":[{"type":"text","text":"a\u00e9"}],"messages":[{"role":"user","content":[{"type":"text","text":"b"}]}]}`,
		`{"instructions":"x","input":[{"content":[{"text":"\ud83d\ude00"}]}],"max_output_tokens":3}`,
		`{"contents":[{"parts":[{"text":"\ud800"}]}],"systemInstruction":{"parts":[{"text":"q"}]},"generationConfig":{"maxOutputTokens":-1}}`,
		`{"prompt":["a","b"],"prompt":"cc","max_tokens":1e2,"max_completion_tokens":-0}`,
		"{\"prompt\":\"\xff\xfe\\u00ff\"}",
		`{"pr\u006fmpt":"abc","max_tokens":18446744073709551615}`,
		`{"messages":[{"content":"a","content":[{"text":"bb"},{"text":1}]}],"messages":[]}`,
		`{"prompt":"a"}x`,
		`[]`,
		``,
	} {
		f.Add([]byte(s), false, uint8(7))
		f.Add([]byte(s), true, uint8(0))
	}
	f.Fuzz(func(t *testing.T, body []byte, chunked bool, step uint8) {
		r := bodyRequest("/v1/chat/completions", body, chunked, int(step)+1)
		got := llmrate.EstimateFromBody()(r)
		if want := refEstimate(body, r.ContentLength); got != want {
			t.Fatalf("EstimateFromBody(%q) = %d, encoding/json finds %d", body, got, want)
		}
		rest, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(rest, body) {
			t.Fatalf("the next handler read %q (%v), the client sent %q", rest, err, body)
		}
	})
}

// benchChat is a chat request of about size bytes: a system message and
// user turns of English text, max_tokens and the model last.
func benchChat(size int) []byte {
	turn := `{"role":"user","content":"Summarise the attached notes in three bullet points, please, and say which of them matter most."},`
	var b strings.Builder
	b.WriteString(`{"messages":[{"role":"system","content":"You are a careful assistant."},`)
	for b.Len()+len(turn) < size-60 {
		b.WriteString(turn)
	}
	s := strings.TrimSuffix(b.String(), ",")
	return []byte(s + `],"max_tokens":1024,"temperature":0.2,"model":"gpt-4o-mini"}`)
}

// jsonChat is what encoding/json needs to estimate a chat request.
type jsonChat struct {
	Model    string `json:"model"`
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	MaxTokens int64 `json:"max_tokens"`
}

// BenchmarkBodyEstimate: per request body size (MB/s = body bytes), the
// read-ahead and scan of EstimateFromBody, ModelFromBody, both on one
// request (one read-ahead, one scan, as the limiter runs them), and
// encoding/json decoding the same fields (a read of the body into a buffer
// kept for the next handler, Unmarshal into a struct, each string content
// decoded).
func BenchmarkBodyEstimate(b *testing.B) {
	for _, size := range []int{1 << 10, 4 << 10, 64 << 10} {
		body := benchChat(size)
		want := refEstimate(body, int64(len(body)))
		name := strconv.Itoa(size>>10) + "KB"
		rd := bytes.NewReader(body)
		rc := io.NopCloser(rd)
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		reset := func() {
			rd.Reset(body)
			r.Body, r.ContentLength = rc, int64(len(body))
		}
		estimate, model := llmrate.EstimateFromBody(), llmrate.ModelFromBody()
		b.Run("EstimateFromBody/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				reset()
				if estimate(r) != want {
					b.Fatal("estimate")
				}
			}
		})
		b.Run("ModelFromBody/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				reset()
				if m, _ := model(r); m != "gpt-4o-mini" {
					b.Fatal(m)
				}
			}
		})
		b.Run("both/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				reset()
				// Estimate first: its scan serves the model too.
				if estimate(r) != want {
					b.Fatal("estimate")
				}
				if m, _ := model(r); m != "gpt-4o-mini" {
					b.Fatal(m)
				}
			}
		})
		b.Run("encoding-json/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				reset()
				buf, err := io.ReadAll(r.Body)
				if err != nil {
					b.Fatal(err)
				}
				r.Body = io.NopCloser(bytes.NewReader(buf))
				var c jsonChat
				if err := json.Unmarshal(buf, &c); err != nil {
					b.Fatal(err)
				}
				var text int64
				for _, m := range c.Messages {
					var s string
					if json.Unmarshal(m.Content, &s) == nil {
						text += int64(len(s))
					}
				}
				if (text+3)/4+c.MaxTokens != want || c.Model != "gpt-4o-mini" {
					b.Fatal("encoding/json disagrees")
				}
			}
		})
	}
}

package llmrate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refModel is what a Go upstream decoding the body into a struct with a
// Model string field finds, per encoding/json: the top-level members whose
// names equal "model" case-insensitively, in one valid JSON object. More
// than one such member with different values (strings compared decoded,
// other values as written) is ambiguous; else the model is the value when
// it is a string, "" otherwise.
func refModel(body []byte) (model string, ambiguous bool) {
	if !json.Valid(body) {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	var vals []json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			panic(err) // json.Valid said it is valid
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			panic(err)
		}
		if strings.EqualFold(tok.(string), "model") {
			vals = append(vals, v)
		}
	}
	if len(vals) == 0 {
		return "", false
	}
	decoded := func(v json.RawMessage) (string, bool) {
		var s string
		return s, json.Unmarshal(v, &s) == nil
	}
	for _, v := range vals[1:] {
		a, aStr := decoded(vals[0])
		b, bStr := decoded(v)
		if aStr && bStr && a != b || aStr != bStr || !aStr && !bytes.Equal(vals[0], v) {
			return "", true
		}
	}
	s, _ := decoded(vals[len(vals)-1])
	return s, false
}

// chunky reads at most n bytes per call, as a network body does.
type chunky struct {
	r io.Reader
	n int
}

func (c *chunky) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

func bodyRequest(path string, body []byte, chunked bool, step int) *http.Request {
	r := httptest.NewRequest(http.MethodPost, path, nil)
	r.Body = io.NopCloser(&chunky{r: bytes.NewReader(body), n: step})
	r.ContentLength = int64(len(body))
	if chunked {
		r.ContentLength = -1
	}
	return r
}

func TestModelFromBody(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, path, body, want string }{
		{"openai", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "gpt-4o"},
		{"model last", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}], "model" : "gpt-4o-mini"}`, "gpt-4o-mini"},
		{"nested only", "/v1/chat/completions", `{"messages":[{"model":"gpt-4o"}],"metadata":{"model":"x"}}`, ""},
		{"duplicate, same value", "/v1/messages", `{"model":"claude-3-5-haiku","model":"claude-3-5-haiku"}`, "claude-3-5-haiku"},
		{"case variants, same decoded value", "/v1/messages", `{"model":"gpt\u002d4o","MODEL":"gpt-4o","mOdEl":"gpt-4o"}`, "gpt-4o"},
		{"escaped capital", "/v1/messages", `{"\u004Dodel":"gpt-4o"}`, "gpt-4o"},
		{"case variant, not a string", "/v1/chat/completions", `{"Model":1}`, ""},
		{"nested case variants", "/v1/chat/completions", `{"messages":[{"Model":"x","model":"y"}],"model":"gpt-4o"}`, "gpt-4o"},
		{"ambiguous but not JSON", "/v1/chat/completions", `{"model":"a","Model":"b"`, ""},
		{"escaped", "/v1/messages", `{"m\u006fdel":"gpt\u002d4o"}`, "gpt-4o"},
		{"not a string", "/v1/chat/completions", `{"model":4}`, ""},
		{"null", "/v1/chat/completions", `{"model":null}`, ""},
		{"case-insensitive, as a Go struct reads it", "/v1/chat/completions", `{"Model":"gpt-4o"}`, "gpt-4o"},
		{"not JSON", "/v1/chat/completions", `model=gpt-4o`, ""},
		{"truncated", "/v1/chat/completions", `{"model":"gpt-4o","messages":[`, ""},
		{"trailing garbage", "/v1/chat/completions", `{"model":"gpt-4o"} x`, ""},
		{"array", "/v1/chat/completions", `[{"model":"gpt-4o"}]`, ""},
		{"gemini path", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", `{"contents":[]}`, "gemini-2.5-flash"},
		{"gemini path, no body", "/v1beta/models/gemini-2.0-pro:generateContent", ``, "gemini-2.0-pro"},
		{"body wins over path", "/v1/models/x:y", `{"model":"gpt-4o"}`, "gpt-4o"},
		{"vertex path", "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent", ``, "gemini-2.5-pro"},
		{"retrieve-model call", "/v1/models/gpt-4o", ``, ""},
		{"colon past the segment", "/v1/models/gpt-4o/x:y", ``, ""},
		{"empty", "/v1/chat/completions", ``, ""},
	}
	for _, c := range cases {
		for _, chunked := range []bool{false, true} {
			r := bodyRequest(c.path, []byte(c.body), chunked, 3)
			got, err := llmrate.ModelFromBody()(r)
			require.NoError(t, err, c.name)
			assert.Equal(t, c.want, got, "ModelFromBody(%q) %s", c.body, c.name)
			rest, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			assert.Equal(t, c.body, string(rest), "the body is still whole: %s", c.name)
		}
	}
}

// A body whose top-level members name the model more than once with
// different values is an error (the middleware's 400 invalid_model):
// parsers differ on which one wins, so the model the limiter charges may not
// be the one the upstream runs.
func TestModelFromBodyAmbiguous(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"model":"gpt-4o-mini","MODEL":"gpt-4o"}`,
		`{"model":"a","model":"claude-3-5-haiku"}`,
		`{"Model":"gpt-4o","messages":[],"model":"gpt-4o-mini"}`,
		`{"model":null,"Model":"gpt-4o"}`,
		`{"model":"gpt-4o","mode\u006C":"gpt-4o ","x":1}`,
		`{"model":1,"model":1.0}`,
	} {
		_, ambiguous := refModel([]byte(body))
		require.True(t, ambiguous, "the reference finds %s ambiguous", body)
		for _, chunked := range []bool{false, true} {
			r := bodyRequest("/v1/chat/completions", []byte(body), chunked, 5)
			got, err := llmrate.ModelFromBody()(r)
			assert.ErrorIs(t, err, llmrate.ErrAmbiguousModel, "ModelFromBody(%s)", body)
			assert.Equal(t, "", got)
			rest, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			assert.Equal(t, body, string(rest), "the body is still whole")
		}
	}
}

// A body declared larger than MaxModelBody is ambiguous when its first
// MaxModelBody bytes are; a chunked one that large names no model.
func TestModelFromBodyAmbiguousLarge(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"gpt-4o-mini","Model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("x", llmrate.MaxModelBody) + `"}]}`)
	r := bodyRequest("/v1/chat/completions", body, false, 64<<10)
	_, err := llmrate.ModelFromBody()(r)
	assert.ErrorIs(t, err, llmrate.ErrAmbiguousModel)
	r = bodyRequest("/v1/chat/completions", body, true, 64<<10)
	m, err := llmrate.ModelFromBody()(r)
	assert.NoError(t, err)
	assert.Equal(t, "", m)
	rest, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(body, rest))
}

// Through the middleware: a case variant is held to its model's limit; an
// ambiguous body gets the OpenAI-shaped 400 invalid_model and reaches
// neither the upstream nor a bucket.
func TestModelFromBodyMiddleware(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	reached := 0
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ }),
		llmrate.WithModel(llmrate.ModelFromBody()),
		llmrate.WithModelLimits(llmrate.ModelLimits{"gpt-4o": uniform(llmrate.Limits{RequestsPerMinute: 5, TokensPerMinute: 100_000})}),
		llmrate.WithObserver(rec))
	send := func(body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer sk-case")
		w := httptest.NewRecorder()
		h.h.ServeHTTP(w, r)
		return w
	}
	w := send(`{"Model":"gpt-4o"}`)
	require.Equal(t, http.StatusOK, w.Code)
	require.Len(t, rec.decisions, 1)
	assert.Equal(t, "gpt-4o", rec.decisions[0].Model, "the case variant spends gpt-4o's buckets")

	w = send(`{"model":"gpt-4o-mini","MODEL":"gpt-4o"}`)
	require.Equal(t, http.StatusBadRequest, w.Code)
	e := decodeErr(t, w)
	assert.Equal(t, "invalid_model", e.Error.Code)
	assert.Equal(t, "invalid_request_error", e.Error.Type)
	assert.Contains(t, e.Error.Message, "more than once")
	assert.Equal(t, 1, reached, "the ambiguous request never reached the upstream")
	assert.Len(t, rec.decisions, 1, "nor a bucket")
}

func TestModelFromBodyLarge(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("x", llmrate.MaxModelBody)
	head := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"` + pad + `"}]}`)
	tail := []byte(`{"messages":[{"role":"user","content":"` + pad + `"}],"model":"gpt-4o"}`)
	exact := []byte(`{"model":"gpt-4o","x":"` + strings.Repeat("y", llmrate.MaxModelBody-len(`{"model":"gpt-4o","x":""}`)) + `"}`)
	require.Len(t, exact, llmrate.MaxModelBody)
	cases := []struct {
		name    string
		body    []byte
		chunked bool
		want    string
	}{
		{"declared, model in the first MiB", head, false, "gpt-4o"},
		{"declared, model past the first MiB", tail, false, ""},
		{"chunked, larger than the bound", head, true, ""},
		{"exactly the bound, declared", exact, false, "gpt-4o"},
		{"exactly the bound, chunked", exact, true, "gpt-4o"},
	}
	for _, c := range cases {
		r := bodyRequest("/v1/chat/completions", c.body, c.chunked, 32<<10)
		got, err := llmrate.ModelFromBody()(r)
		require.NoError(t, err)
		assert.Equal(t, c.want, got, c.name)
		rest, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(c.body, rest), "%s: the body is still whole", c.name)
	}
}

// A body that fails mid-read gives "" and the next handler sees the bytes
// read before the failure, then the same error.
func TestModelFromBodyReadError(t *testing.T) {
	t.Parallel()
	boom := errors.New("connection reset")
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Body = io.NopCloser(io.MultiReader(strings.NewReader(`{"model":"gpt-4o",`), errorReader{boom}))
	r.ContentLength = 100
	got, err := llmrate.ModelFromBody()(r)
	require.NoError(t, err)
	assert.Equal(t, "", got)
	rest, err := io.ReadAll(r.Body)
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, `{"model":"gpt-4o",`, string(rest))
}

type errorReader struct{ err error }

func (e errorReader) Read([]byte) (int, error) { return 0, e.err }

// Through the middleware and a ReverseProxy, the upstream receives the
// body byte for byte with its Content-Length, and the model's limit
// applied.
func TestModelFromBodyReverseProxy(t *testing.T) {
	t.Parallel()
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("héllo ", 3000) + `"}]}`
	var got []byte
	var gotLen int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		gotLen = r.ContentLength
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	t.Cleanup(upstream.Close)
	u, err := url.Parse(upstream.URL)
	require.NoError(t, err)
	rec := &recorder{}
	l, err := llmrate.New(llmrate.WithModel(llmrate.ModelFromBody()),
		llmrate.WithModelLimits(llmrate.ModelLimits{"gpt-4o": uniform(llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 100_000})}),
		llmrate.WithObserver(rec))
	require.NoError(t, err)
	gw := httptest.NewServer(l.Middleware(httputil.NewSingleHostReverseProxy(u)))
	t.Cleanup(gw.Close)
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		req, err := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer sk-proxy")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "request %d", i)
		if want == http.StatusOK {
			assert.Equal(t, body, string(got), "the upstream got the body byte for byte")
			assert.Equal(t, int64(len(body)), gotLen)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.decisions, 3)
	for _, d := range rec.decisions {
		assert.Equal(t, "gpt-4o", d.Model)
	}
}

func uniform(l llmrate.Limits) llmrate.TierTable {
	return llmrate.TierTable{Free: l, Developer: l, Team: l, Growth: l, Scale: l, Enterprise: l}
}

// FuzzModelFromBody: ModelFromBody returns exactly the top-level model
// string encoding/json finds, or "", and the next handler reads the very
// bytes the client sent, whatever the read sizes.
func FuzzModelFromBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"model":"x"}],"model":"claude-3-5-haiku-20241022","stream":true}`,
		`{"m\u006fdel":"a\u00e9\ud83d\ude00","model":"b"}`,
		`{"model":"\xff\xfe"}`,
		`{"model":1e400,"x":[[[[{}]]]]}`,
		`{"model":"gpt-4o"} `,
		`{"Model":"a","MODEL":"a","mode\u006c":"b"}`,
		`{"MoDeL":"x","messages":[{"Model":"y"}]}`,
		`{"model":"gpt-4o"}}`,
		`{"a":-0.5e+3,"b":[true,false,null],"model":""}`,
		`{"model" "x"}`,
		`[]`,
		``,
	} {
		f.Add([]byte(s), false, uint8(7))
		f.Add([]byte(s), true, uint8(1))
	}
	f.Fuzz(func(t *testing.T, body []byte, chunked bool, step uint8) {
		r := bodyRequest("/v1/chat/completions", body, chunked, int(step)+1)
		got, err := llmrate.ModelFromBody()(r)
		if err != nil && !errors.Is(err, llmrate.ErrAmbiguousModel) {
			t.Fatalf("ModelFromBody(%q): error %v", body, err)
		}
		if len(body) <= llmrate.MaxModelBody {
			want, ambiguous := refModel(body)
			if ambiguous != (err != nil) || got != want {
				t.Fatalf("ModelFromBody(%q) = %q, %v; encoding/json finds %q (ambiguous: %v)", body, got, err, want, ambiguous)
			}
		}
		rest, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(rest, body) {
			t.Fatalf("the next handler read %q (%v), the client sent %q", rest, err, body)
		}
	})
}

// BenchmarkModelFromBody: reading the model ahead of a 2 KB chat request
// (to compare with the usage scan of a body of the same size).
func BenchmarkModelFromBody(b *testing.B) {
	msg := strings.Repeat(`{"role":"user","content":"Summarise the attached notes in three bullet points, please."},`, 22)
	body := []byte(`{"messages":[` + msg[:len(msg)-1] + `],"model":"gpt-4o-mini","temperature":0.2,"stream":true}`)
	if len(body) < 2000 || len(body) > 2100 {
		b.Fatalf("body is %d bytes, want about 2 KB", len(body))
	}
	extract := llmrate.ModelFromBody()
	rd := bytes.NewReader(body)
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		r.Body, r.ContentLength = io.NopCloser(rd), int64(len(body))
		if m, _ := extract(r); m != "gpt-4o-mini" {
			b.Fatal(m)
		}
	}
}

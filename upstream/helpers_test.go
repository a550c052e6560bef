package upstream_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/require"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// call is one request a fake provider received.
type call struct {
	Cred   string // the credential it carried (Authorization or x-api-key)
	Body   []byte
	Header http.Header
}

// provider is a fake LLM provider: each credential answers with its own
// handler (default: an OpenAI-shaped JSON completion with usage 10 + 5).
type provider struct {
	srv *httptest.Server
	mu  sync.Mutex
	log []call
	by  map[string]http.HandlerFunc
}

func newProvider(t *testing.T) *provider {
	t.Helper()
	p := &provider{by: map[string]http.HandlerFunc{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func credential(h http.Header) string {
	if v := h.Get("Authorization"); v != "" {
		return strings.TrimPrefix(v, "Bearer ")
	}
	return h.Get("X-Api-Key")
}

func (p *provider) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	cred := credential(r.Header)
	p.mu.Lock()
	p.log = append(p.log, call{Cred: cred, Body: body, Header: r.Header.Clone()})
	h := p.by[cred]
	p.mu.Unlock()
	if h == nil {
		h = openAIJSON(10, 5, "hello")
	}
	h(w, r)
}

// on sets how credential cred is answered.
func (p *provider) on(cred string, h http.HandlerFunc) {
	p.mu.Lock()
	p.by[cred] = h
	p.mu.Unlock()
}

// calls returns the requests received so far.
func (p *provider) calls() []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]call(nil), p.log...)
}

// creds returns the credentials of the requests received so far, in order.
func (p *provider) creds() []string {
	var out []string
	for _, c := range p.calls() {
		out = append(out, c.Cred)
	}
	return out
}

// openAIJSON answers a chat completion with the given usage.
func openAIJSON(prompt, completion int, content string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion",
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": content}, "finish_reason": "stop"}},
			"usage":   map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
		})
	}
}

// openAIStream is an OpenAI chat completion stream with include_usage: one
// chunk per word, the usage chunk, then data: [DONE].
func openAIStream(prompt, completion int, words ...string) string {
	var b strings.Builder
	for _, w := range words {
		c, _ := json.Marshal(map[string]any{"object": "chat.completion.chunk", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": w}}}, "usage": nil})
		fmt.Fprintf(&b, "data: %s\n\n", c)
	}
	u, _ := json.Marshal(map[string]any{"object": "chat.completion.chunk", "choices": []any{}, "usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
	fmt.Fprintf(&b, "data: %s\n\ndata: [DONE]\n\n", u)
	return b.String()
}

// anthropicStream is an Anthropic Messages stream: message_start with the
// input tokens, the text, message_delta with the output tokens,
// message_stop.
func anthropicStream(input, output int, text string) string {
	t, _ := json.Marshal(text)
	return "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":" + fmt.Sprint(input) + ",\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":" + string(t) + "}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":" + fmt.Sprint(output) + "}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
}

// sse answers stream as an event stream; with hold, it then keeps the
// response open until the client goes away (so only a Close ends it).
func sse(stream string, hold bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, stream)
		w.(http.Flusher).Flush()
		if hold {
			<-r.Context().Done()
		}
	}
}

// tooMany answers 429 with the given headers (name, value pairs) and an
// OpenAI-shaped body.
func tooMany(kv ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(kv); i += 2 {
			w.Header().Set(kv[i], kv[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"provider says slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
	}
}

// withHeaders wraps h, setting response headers (name, value pairs) first.
func withHeaders(h http.HandlerFunc, kv ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(kv); i += 2 {
			w.Header().Set(kv[i], kv[i+1])
		}
		h(w, r)
	}
}

// bearerKey is a Key whose credential is "Bearer "+secret.
func bearerKey(name, secret string, rpm, tpm int64) upstream.Key {
	return upstream.Key{Name: name, Limits: llmrate.Limits{RequestsPerMinute: rpm, TokensPerMinute: tpm},
		Authorize: func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+secret) }}
}

// recorder records the Transport's events.
type recorder struct {
	mu         sync.Mutex
	attempts   []upstream.AttemptEvent
	reconciles []upstream.ReconcileEvent
}

func (r *recorder) Attempted(e upstream.AttemptEvent) {
	r.mu.Lock()
	r.attempts = append(r.attempts, e)
	r.mu.Unlock()
}

func (r *recorder) Reconciled(e upstream.ReconcileEvent) {
	r.mu.Lock()
	r.reconciles = append(r.reconciles, e)
	r.mu.Unlock()
}

// outcomes returns "name:outcome" for each attempt event so far, and
// forgets them.
func (r *recorder) outcomes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.attempts {
		out = append(out, e.Key+":"+e.Outcome.String())
	}
	r.attempts = nil
	return out
}

func (r *recorder) reconciled() []upstream.ReconcileEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reconciles
	r.reconciles = nil
	return out
}

// rig is a Transport over keys in front of a fake provider, with a memory
// store, a fake clock and a recorder.
type rig struct {
	p     *provider
	clk   *fakeClock
	store *llmrate.MemoryStore
	rec   *recorder
	tr    *upstream.Transport
	keys  []upstream.Key
}

func newRig(t *testing.T, keys []upstream.Key, opts ...upstream.Option) *rig {
	t.Helper()
	r := &rig{p: newProvider(t), clk: newClock(), store: llmrate.NewMemoryStore(), rec: &recorder{}, keys: keys}
	all := append([]upstream.Option{upstream.WithStore(r.store), upstream.WithClock(r.clk.Now), upstream.WithObserver(r.rec)}, opts...)
	tr, err := upstream.New(keys, all...)
	require.NoError(t, err)
	r.tr = tr
	return r
}

// client is an http.Client over the rig's Transport.
func (r *rig) client() *http.Client { return &http.Client{Transport: r.tr} }

// post sends body to the provider through the Transport and returns the
// response with its body read whole and closed.
func (r *rig) post(t *testing.T, body string) (*http.Response, string) {
	t.Helper()
	resp, err := r.client().Post(r.p.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp, string(b)
}

// levels returns key name's bucket levels now.
func (r *rig) levels(name string) [4]int64 {
	for _, k := range r.keys {
		if k.Name == name {
			ws := "upstream:" + name
			return r.store.Levels(ws, ws, k.Limits, k.Limits, r.clk.Now())
		}
	}
	panic("no key " + name)
}

// chat is a chat request body of exactly n bytes (n >= 64) for model.
func chat(model string, n int) string {
	head := `{"model":"` + model + `","messages":[{"role":"user","content":"`
	tail := `"}]}`
	return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
}

// trackedBody is a request body that counts its Closes.
type trackedBody struct {
	io.Reader
	closed atomic.Int32
}

func (b *trackedBody) Close() error {
	b.closed.Add(1)
	return nil
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

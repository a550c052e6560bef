package clients_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/llmrate/llmrate"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What the fake OpenAI upstream reports.
const (
	oaPrompt, oaCompletion = 31, 7
	oaReply                = "Hello there"
)

// oaStream is the streamed reply: the text deltas, a finish chunk and a
// usage chunk (stream_options.include_usage), then [DONE].
var oaStream = []string{
	`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1767322000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
	`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1767322000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`,
	`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1767322000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}]}`,
	`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1767322000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
	`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1767322000,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":31,"completion_tokens":7,"total_tokens":38}}`,
	`[DONE]`,
}

const oaCompletionBody = `{"id":"chatcmpl-1","object":"chat.completion","created":1767322000,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":31,"completion_tokens":7,"total_tokens":38}}`

// openAIUpstream is a fake OpenAI chat completions endpoint. It answers in
// brotli when the request accepts br, else in gzip when it accepts gzip,
// else in identity, flushing after every event of a stream, and records
// the (encoded) bytes it sent and the Accept-Encoding it got.
type openAIUpstream struct {
	mu             sync.Mutex
	sent           bytes.Buffer
	acceptEncoding string
}

type encoder interface {
	io.Writer
	Flush() error
	Close() error
}

func (u *openAIUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Stream bool `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ae := r.Header.Get("Accept-Encoding")
	u.mu.Lock()
	u.acceptEncoding = ae
	u.mu.Unlock()

	out := io.MultiWriter(writerFunc(func(p []byte) (int, error) {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.sent.Write(p)
	}), w)
	var enc encoder
	switch {
	case strings.Contains(ae, "br"):
		w.Header().Set("Content-Encoding", "br")
		enc = brotli.NewWriterLevel(out, 5)
	case strings.Contains(ae, "gzip"):
		w.Header().Set("Content-Encoding", "gzip")
		enc = gzip.NewWriter(out)
	default:
		enc = nopEncoder{out}
	}
	w.Header().Set("Vary", "Accept-Encoding")
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(enc, oaCompletionBody)
		_ = enc.Close()
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range oaStream {
		_, _ = io.WriteString(enc, "data: "+ev+"\n\n")
		_ = enc.Flush()
		http.NewResponseController(w).Flush()
	}
	_ = enc.Close()
}

func (u *openAIUpstream) sentBytes() []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return bytes.Clone(u.sent.Bytes())
}

type nopEncoder struct{ io.Writer }

func (nopEncoder) Flush() error { return nil }
func (nopEncoder) Close() error { return nil }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// acceptEncoding is the SDKs' transport: it makes every request carry
// "Accept-Encoding: <enc>" (when enc is set) and decodes the response as a client that
// supports the coding does, keeping the raw bytes it received.
type acceptEncoding struct {
	enc  string
	base http.RoundTripper

	mu  sync.Mutex
	raw bytes.Buffer
	ce  string
}

func (a *acceptEncoding) RoundTrip(req *http.Request) (*http.Response, error) {
	if a.enc != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Accept-Encoding", a.enc)
	}
	resp, err := a.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	ce := resp.Header.Get("Content-Encoding")
	a.mu.Lock()
	a.ce = ce
	a.mu.Unlock()
	raw := io.TeeReader(resp.Body, writerFunc(func(p []byte) (int, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.raw.Write(p)
	}))
	var dec io.Reader
	switch ce {
	case "br":
		dec = brotli.NewReader(raw)
	case "gzip":
		dec = &lazyGzip{src: raw}
	case "":
		dec = raw
	default:
		_ = resp.Body.Close()
		return nil, &url.Error{Op: "decode", URL: req.URL.String(), Err: io.ErrUnexpectedEOF}
	}
	resp.Body = &drainCloser{Reader: dec, raw: raw, body: resp.Body}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Uncompressed = true
	return resp, nil
}

func (a *acceptEncoding) received() (raw []byte, contentEncoding string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return bytes.Clone(a.raw.Bytes()), a.ce
}

// drainCloser is the decoded body. Close reads what the SDK left unread
// (an SSE client stops at [DONE]; a brotli reader may stop before the
// stream's last byte) so that the raw bytes recorded are the whole body
// and the response ends as a complete one: a client that hangs up after
// [DONE] while the gateway is still finishing may otherwise be seen as
// cutting the response off, which the tests here do not examine.
type drainCloser struct {
	io.Reader
	raw  io.Reader
	body io.Closer
}

func (d *drainCloser) Close() error {
	_, _ = io.Copy(io.Discard, d.raw)
	return d.body.Close()
}

// lazyGzip opens the gzip stream on the first Read, so that RoundTrip
// returns before the first event of a stream arrives.
type lazyGzip struct {
	src io.Reader
	zr  *gzip.Reader
}

func (g *lazyGzip) Read(p []byte) (int, error) {
	if g.zr == nil {
		zr, err := gzip.NewReader(g.src)
		if err != nil {
			return 0, err
		}
		g.zr = zr
	}
	return g.zr.Read(p)
}

// openAIGateway is llmrate in front of httputil.ReverseProxy to the fake
// upstream, and an OpenAI client whose requests carry Accept-Encoding enc.
func openAIGateway(t *testing.T, enc string) (openai.Client, *openAIUpstream, *acceptEncoding, *reconciles) {
	t.Helper()
	up := &openAIUpstream{}
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	target, err := url.Parse(upstream.URL)
	require.NoError(t, err)
	proxy := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     upstream.Client().Transport,
		FlushInterval: -1,
	}
	rec := newReconciles()
	lim, err := llmrate.New(llmrate.WithClock(fixedClock), llmrate.WithObserver(rec))
	require.NoError(t, err)
	gw := httptest.NewServer(lim.Middleware(proxy))
	t.Cleanup(gw.Close)
	tr := &acceptEncoding{enc: enc, base: gw.Client().Transport}
	client := openai.NewClient(
		option.WithBaseURL(gw.URL+"/v1/"),
		option.WithAPIKey("sk-gateway-key"),
		option.WithHTTPClient(&http.Client{Transport: tr}),
		option.WithMaxRetries(0),
	)
	return client, up, tr, rec
}

var openAIEncodings = []struct{ name, acceptEncoding, contentEncoding string }{
	{"identity", "identity", ""},
	{"gzip", "gzip", "gzip"},
	{"br", "br", "br"}, // reconciles once the br decoder is wired into the scanner
}

func chatParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
	}
}

// assertWire checks that the upstream got the client's Accept-Encoding
// through the proxy, answered in the expected coding, and that the client
// received exactly the bytes the upstream sent.
func assertWire(t *testing.T, up *openAIUpstream, tr *acceptEncoding, acceptEnc, contentEnc string) {
	t.Helper()
	up.mu.Lock()
	gotAE := up.acceptEncoding
	up.mu.Unlock()
	assert.Equal(t, acceptEnc, gotAE, "Accept-Encoding at the upstream")
	raw, ce := tr.received()
	assert.Equal(t, contentEnc, ce, "Content-Encoding at the client")
	sent := up.sentBytes()
	require.NotEmpty(t, sent)
	assert.True(t, bytes.Equal(sent, raw), "the client received the upstream's bytes unchanged (%d sent, %d received)", len(sent), len(raw))
}

func TestOpenAIClientCompletion(t *testing.T) {
	for _, e := range openAIEncodings {
		t.Run(e.name, func(t *testing.T) {
			client, up, tr, rec := openAIGateway(t, e.acceptEncoding)
			resp, err := client.Chat.Completions.New(context.Background(), chatParams())
			require.NoError(t, err)
			require.Len(t, resp.Choices, 1)
			assert.Equal(t, oaReply, resp.Choices[0].Message.Content)
			assert.Equal(t, int64(oaPrompt), resp.Usage.PromptTokens)
			assert.Equal(t, int64(oaCompletion), resp.Usage.CompletionTokens)
			assertWire(t, up, tr, e.acceptEncoding, e.contentEncoding)

			ev := rec.next(t)
			assert.Equal(t, llmrate.ReconcileUsage, ev.Kind, "reconcile kind (%s)", e.name)
			assert.Equal(t, int64(oaPrompt+oaCompletion), ev.Actual, "charge (%s)", e.name)
			assert.Equal(t, llmrate.Usage{InputTokens: oaPrompt, OutputTokens: oaCompletion}, ev.Reported)
			assert.NoError(t, ev.Undecoded, "the %s body was decoded whole", e.name)
		})
	}
}

func TestOpenAIClientStream(t *testing.T) {
	for _, e := range openAIEncodings {
		t.Run(e.name, func(t *testing.T) {
			client, up, tr, rec := openAIGateway(t, e.acceptEncoding)
			params := chatParams()
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			stream := client.Chat.Completions.NewStreaming(context.Background(), params)
			var acc openai.ChatCompletionAccumulator
			var deltas []string
			for stream.Next() {
				chunk := stream.Current()
				acc.AddChunk(chunk)
				for _, c := range chunk.Choices {
					if c.Delta.Content != "" {
						deltas = append(deltas, c.Delta.Content)
					}
				}
			}
			require.NoError(t, stream.Err())
			require.NoError(t, stream.Close())
			assert.Equal(t, []string{"Hello", " there"}, deltas, "every text delta arrives")
			require.Len(t, acc.Choices, 1)
			assert.Equal(t, oaReply, acc.Choices[0].Message.Content)
			assert.Equal(t, int64(oaPrompt), acc.Usage.PromptTokens)
			assert.Equal(t, int64(oaCompletion), acc.Usage.CompletionTokens)
			assertWire(t, up, tr, e.acceptEncoding, e.contentEncoding)

			ev := rec.next(t)
			assert.Equal(t, llmrate.ReconcileUsage, ev.Kind, "reconcile kind (%s)", e.name)
			assert.Equal(t, int64(oaPrompt+oaCompletion), ev.Actual, "charge (%s)", e.name)
			assert.Equal(t, llmrate.Usage{InputTokens: oaPrompt, OutputTokens: oaCompletion}, ev.Reported)
			assert.NoError(t, ev.Undecoded, "the %s body was decoded whole", e.name)
		})
	}
}

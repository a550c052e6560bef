package clients_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/llmrate/llmrate"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const anthropicMessageBody = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello there"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":31,"output_tokens":7}}`

// statusWriter records the status a response was given.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// overloadGateway is llmrate with an in-flight cap of 1 in front of a fake
// provider answering body. One request, the holder, is held inside the
// provider: the client's first attempt finds the cap full and is shed.
// The gateway then lets the holder go and waits for its slot to be given
// back before the shed answer is sent, so the SDK's retry (after the
// Retry-After of 1 s) finds the slot free. statuses returns the status of
// every attempt other than the holder's, in order.
func overloadGateway(t *testing.T, body string) (gwURL string, lim *llmrate.Limiter, statuses func() []int) {
	t.Helper()
	held, release := make(chan struct{}), make(chan struct{})
	provider := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Hold") != "" {
			close(held)
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	})
	lim, err := llmrate.New(llmrate.WithClock(fixedClock), llmrate.WithMaxInFlight(1))
	require.NoError(t, err)
	inner := lim.Middleware(provider)

	var mu sync.Mutex
	var seen []int
	holderDone := make(chan struct{})
	var releaseOnce sync.Once
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			inner.ServeHTTP(w, r)
			close(holderDone) // its slot is given back
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		inner.ServeHTTP(sw, r)
		mu.Lock()
		seen = append(seen, sw.code)
		mu.Unlock()
		if sw.code != http.StatusOK {
			releaseOnce.Do(func() { close(release) })
			<-holderDone
		}
	}))
	t.Cleanup(gw.Close)

	holder := make(chan error, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, gw.URL+"/v1/hold", nil)
		if err != nil {
			holder <- err
			return
		}
		req.Header.Set("Authorization", "Bearer sk-holder")
		req.Header.Set("X-Hold", "1")
		res, err := gw.Client().Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
		}
		holder <- err
	}()
	<-held
	// Run in reverse: the holder is let go (if no shed did it), then its
	// request must have succeeded.
	t.Cleanup(func() { require.NoError(t, <-holder) })
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	return gw.URL, lim, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), seen...)
	}
}

// TestOpenAIClientRetriesOverloaded: the OpenAI SDK retries the 503
// overloaded answer of a gateway at its in-flight cap on its own, and its
// retry succeeds.
func TestOpenAIClientRetriesOverloaded(t *testing.T) {
	gwURL, lim, statuses := overloadGateway(t, oaCompletionBody)
	client := openai.NewClient(
		option.WithBaseURL(gwURL+"/v1/"),
		option.WithAPIKey("sk-gateway-key"),
		option.WithMaxRetries(2),
	)
	resp, err := client.Chat.Completions.New(context.Background(), chatParams())
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	assert.Equal(t, oaReply, resp.Choices[0].Message.Content)
	assert.Equal(t, []int{http.StatusServiceUnavailable, http.StatusOK}, statuses())
	assert.Equal(t, int64(1), lim.Shed())
}

// TestAnthropicClientRetriesOverloaded: the Anthropic SDK sends
// anthropic-version, so the gateway at its in-flight cap answers it
// Anthropic's 529 overloaded_error; the SDK retries it on its own, and its
// retry succeeds.
func TestAnthropicClientRetriesOverloaded(t *testing.T) {
	gwURL, lim, statuses := overloadGateway(t, anthropicMessageBody)
	client := anthropic.NewClient(
		anthropicoption.WithBaseURL(gwURL),
		anthropicoption.WithAPIKey("sk-ant-gateway-key"),
		anthropicoption.WithMaxRetries(2),
	)
	msg, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model:     anthropic.Model("claude-sonnet-4-5"),
		MaxTokens: 64,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello."))},
	})
	require.NoError(t, err)
	require.Len(t, msg.Content, 1)
	assert.Equal(t, "Hello there", msg.Content[0].Text)
	assert.Equal(t, []int{529, http.StatusOK}, statuses())
	assert.Equal(t, int64(1), lim.Shed())
}

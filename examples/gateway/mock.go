package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// mockProvider is a built-in OpenAI-compatible provider: POST
// /v1/chat/completions answers JSON, or SSE when the request says
// "stream": true (with a usage chunk only when stream_options.include_usage
// is set, as OpenAI does). Usage: prompt = request bytes / 4, completion =
// the words it answers with.
type mockProvider struct {
	words int           // words in each answer
	delay time.Duration // pause between streamed chunks
	// refuse429Prefix, when set, makes the mock answer 429 (Retry-After:
	// 30, as OpenAI does) to every credential that starts with it: a
	// provider key out of room, for the upstream-keys demo.
	refuse429Prefix string
}

type chatRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (m *mockProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := m.refuse429Prefix; p != "" && strings.HasPrefix(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), p) {
		refuse429(w)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, `{"error":{"message":"use POST","type":"invalid_request_error","param":null,"code":null}}`, http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	var req chatRequest
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"We could not parse the JSON body of your request.","type":"invalid_request_error","param":null,"code":null}}`)
		return
	}
	if req.Model == "" {
		req.Model = "mock-gpt"
	}
	c := completion{id: fmt.Sprintf("chatcmpl-mock%d", time.Now().UnixNano()), model: req.Model, prompt: max(1, len(body)/4), words: m.answer()}
	if !req.Stream {
		c.write(w)
		return
	}
	m.stream(w, r, c, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
}

// refuse429 answers as OpenAI does when its own rate limit refuses.
func refuse429(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "30")
	w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
	w.Header().Set("X-Ratelimit-Reset-Requests", "30s")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached for requests (mock).","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
}

// answer returns the mock's answer: m.words words.
func (m *mockProvider) answer() []string {
	words := make([]string, m.words)
	for i := range words {
		words[i] = [...]string{"rate", "limits", "keep", "gateways", "honest"}[i%5]
	}
	return words
}

// completion is one mock answer: its id, model, prompt size in tokens
// and words (one token each).
type completion struct {
	id, model string
	prompt    int
	words     []string
}

func (c completion) usage() map[string]any {
	return map[string]any{"prompt_tokens": c.prompt, "completion_tokens": len(c.words), "total_tokens": c.prompt + len(c.words)}
}

// write answers c in one JSON body.
func (c completion) write(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": c.id, "object": "chat.completion", "created": time.Now().Unix(), "model": c.model,
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": strings.Join(c.words, " ")}, "finish_reason": "stop"}},
		"usage":   c.usage(),
	})
}

// stream answers c as server-sent events, a word a chunk (m.delay apart),
// with a final usage chunk when the request asked for it (withUsage).
func (m *mockProvider) stream(w http.ResponseWriter, r *http.Request, c completion, withUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	send := func(v any) {
		b, _ := json.Marshal(v)
		_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		ch := map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": c.model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		if withUsage {
			ch["usage"] = nil
		}
		return ch
	}
	send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for i, word := range c.words {
		if i > 0 {
			word = " " + word
		}
		if m.delay > 0 {
			select {
			case <-time.After(m.delay):
			case <-r.Context().Done():
				return
			}
		}
		send(chunk(map[string]any{"content": word}, nil))
	}
	send(chunk(map[string]any{}, "stop"))
	if withUsage {
		send(map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": c.model, "choices": []any{},
			"usage": c.usage()})
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

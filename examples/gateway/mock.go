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
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "30")
		w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
		w.Header().Set("X-Ratelimit-Reset-Requests", "30s")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached for requests (mock).","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
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
	prompt := max(1, len(body)/4)
	words := make([]string, m.words)
	for i := range words {
		words[i] = [...]string{"rate", "limits", "keep", "gateways", "honest"}[i%5]
	}
	id := fmt.Sprintf("chatcmpl-mock%d", time.Now().UnixNano())
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": strings.Join(words, " ")}, "finish_reason": "stop"}},
			"usage":   map[string]any{"prompt_tokens": prompt, "completion_tokens": len(words), "total_tokens": prompt + len(words)},
		})
		return
	}
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
	withUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		if withUsage {
			c["usage"] = nil
		}
		return c
	}
	send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for i, word := range words {
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
		send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": req.Model, "choices": []any{},
			"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": len(words), "total_tokens": prompt + len(words)}})
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// Command anthropic limits an Anthropic-style API: keys arrive in
// x-api-key (BearerToken reads it when there is no Authorization header)
// and usage comes from the Messages API's message_start and cumulative
// message_delta events.
package main

import (
	"fmt"
	"log"
	"net/http"

	"github.com/llmrate/llmrate"
)

// messages is a stand-in for POST /v1/messages with "stream": true.
var messages = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	f, _ := w.(http.Flusher)
	for _, ev := range []string{
		`event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":25,"cache_read_input_tokens":100,"output_tokens":1}}}`,
		`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
		`event: message_delta` + "\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}`,
		`event: message_stop` + "\n" + `data: {"type":"message_stop"}`,
	} {
		fmt.Fprintf(w, "%s\n\n", ev)
		if f != nil {
			f.Flush()
		}
	}
})

func newHandler(opts ...llmrate.Option) (http.Handler, error) {
	lim, err := llmrate.New(opts...) // default key extractor: Bearer, else x-api-key
	if err != nil {
		return nil, err
	}
	return lim.Middleware(messages), nil
}

func main() {
	h, err := newHandler()
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", h))
}

package usage_test

import (
	"fmt"

	"github.com/llmrate/llmrate/usage"
)

// The scanner finds a stream's usage as it passes, whatever the write
// boundaries.
func ExampleScanner() {
	s := usage.NewScanner("text/event-stream", "")
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":40,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello!\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":25}}\n\n"
	for i := 0; i < len(stream); i += 7 {
		_, _ = s.Write([]byte(stream[i:min(i+7, len(stream))]))
	}
	r := s.Finish()
	fmt.Println(r.Reported, r.Final, r.Usage.InputTokens, r.Usage.OutputTokens, r.GeneratedBytes)
	// Output:
	// true true 40 25 6
}

// A stream cut after Anthropic's message_start reports partial usage: the
// charge is the reported input plus the larger of the reported output and
// the generated text's bytes ÷ 4.
func ExampleResult_Charge() {
	s := usage.NewScanner("text/event-stream", "")
	_, _ = s.Write([]byte("data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":40,\"output_tokens\":1}}}\n\n" +
		"data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"" + "0123456789abcdef0123456789abcdef0123456789" + "\"}}\n\n" +
		"data: {\"type\":\"message_del"))
	r := s.Finish()
	fmt.Println(r.PendingEvent, r.Final, r.Charge(1000, false))
	// Output:
	// true false 50
}

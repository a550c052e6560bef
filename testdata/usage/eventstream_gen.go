//go:build ignore

// eventstream_gen writes the AWS event-stream fixtures of this directory
// (Amazon Bedrock ConverseStream and InvokeModelWithResponseStream bodies,
// Content-Type application/vnd.amazon.eventstream) with real framing:
// prelude, headers, payload and both CRCs, encoded by the AWS SDK's own
// eventstream.Encoder. Their expected usage is in manifest-eventstream.json.
//
// Run from the repository root:
//
//	go run testdata/usage/eventstream_gen.go
//
// The output is deterministic: running it again rewrites the same bytes.
// Texts, ids and numbers are invented; event names, header names, field
// names and the "p" padding member are Bedrock's.
package main

import (
	"bytes"
	"encoding/base64"
	"log"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

const dir = "testdata/usage"

// event is one message: its :message-type, its :event-type (or
// :exception-type for an exception) and its JSON payload.
type event struct {
	messageType string
	name        string
	payload     string
}

func ev(name, payload string) event { return event{"event", name, payload} }

// chunk wraps one of the model's own events as InvokeModelWithResponseStream
// sends it: {"bytes":"<base64>","p":"<padding>"}.
func chunk(inner, pad string) event {
	return ev("chunk", `{"bytes":"`+base64.StdEncoding.EncodeToString([]byte(inner))+`","p":"`+pad+`"}`)
}

var converse = []event{
	ev("messageStart", `{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW","role":"assistant"}`),
	ev("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Sure. Token counts in a Converse"},"p":"abcdefghijklmnopqrstu"}`),
	ev("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":" response look like \"usage\":{\"inputTokens\":999999,\"outputTokens\":999999}"},"p":"abcdefgh"}`),
	ev("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":" and arrive in the final metadata event. ✓"},"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJK"}`),
	ev("contentBlockStop", `{"contentBlockIndex":0,"p":"abcdefghijklmnopqrstuvwxyzABCD"}`),
	ev("messageStop", `{"p":"abcdefghijklmnopq","stopReason":"end_turn"}`),
	ev("metadata", `{"metrics":{"latencyMs":1187},"p":"abcdefghijklmnopqrstuvwxyzABCDEF","usage":{"cacheReadInputTokenCount":1024,"cacheReadInputTokens":1024,"cacheWriteInputTokenCount":0,"cacheWriteInputTokens":0,"inputTokens":37,"outputTokens":58,"totalTokens":1119}}`),
}

var invokeAnthropic = []event{
	chunk(`{"type":"message_start","message":{"id":"msg_bdrk_01KJ4t8ZqzvC2nWfQeXh7Gdp","type":"message","role":"assistant","model":"claude-3-5-sonnet-20241022","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"),
	chunk(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`, "abcdefghijklmnopq"),
	chunk(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Event streams frame every"}}`, "abcdefghijklmnopqrstuvwxyzABCDEFGH"),
	chunk(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" message with a prelude, headers and two CRCs."}}`, "abcdefghij"),
	chunk(`{"type":"content_block_stop","index":0}`, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX"),
	chunk(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":42}}`, "abcdefghijklmnopqrstuvwxy"),
	chunk(`{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":25,"outputTokenCount":42,"invocationLatency":1210,"firstByteLatency":402}}`, "abcdefghijklmnopqrstuvwxyzA"),
}

// invokeLlama is a model whose own events carry no usage the limiter
// reads (Meta Llama's prompt_token_count / generation_token_count): only the
// last chunk's amazon-bedrock-invocationMetrics reports it.
var invokeLlama = []event{
	chunk(`{"generation":"Rate limits","prompt_token_count":18,"generation_token_count":2,"stop_reason":null}`, "abcdefghijklmnop"),
	chunk(`{"generation":" are counted per minute.","prompt_token_count":null,"generation_token_count":7,"stop_reason":null}`, "abcdefghijklmnopqrstuvwxyz"),
	chunk(`{"generation":"","prompt_token_count":null,"generation_token_count":8,"stop_reason":"stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":18,"outputTokenCount":8,"invocationLatency":512,"firstByteLatency":190}}`, "abcdefgh"),
}

var converseException = []event{
	ev("messageStart", `{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW","role":"assistant"}`),
	ev("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"The first half of an answer"},"p":"abcdefghijklmnopqrstu"}`),
	ev("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":" that the model never finishes"},"p":"abcdefgh"}`),
	{"exception", "modelStreamErrorException", `{"message":"Model stream error: the model produced an invalid sequence","originalMessage":"usage so far: inputTokens 37","originalStatusCode":424,"usage":{"inputTokens":999999,"outputTokens":999999}}`},
}

func main() {
	write("bedrock-converse-stream.eventstream", encode(converse), 0)
	write("bedrock-invoke-anthropic-stream.eventstream", encode(invokeAnthropic), 0)
	write("bedrock-invoke-llama-stream.eventstream", encode(invokeLlama), 0)
	write("bedrock-converse-stream-exception.eventstream", encode(converseException), 0)
	// The same stream as bedrock-converse-stream, cut 40 bytes into its
	// metadata message (inside the headers).
	full := encode(converse)
	last := encode(converse[len(converse)-1:])
	write("bedrock-converse-stream-truncated.eventstream", full, len(full)-len(last)+40)
}

func encode(events []event) []byte {
	var buf bytes.Buffer
	enc := eventstream.NewEncoder()
	for _, e := range events {
		var hs eventstream.Headers
		if e.messageType == "exception" {
			hs.Set(":exception-type", eventstream.StringValue(e.name))
		} else {
			hs.Set(":event-type", eventstream.StringValue(e.name))
		}
		hs.Set(":content-type", eventstream.StringValue("application/json"))
		hs.Set(":message-type", eventstream.StringValue(e.messageType))
		if err := enc.Encode(&buf, eventstream.Message{Headers: hs, Payload: []byte(e.payload)}); err != nil {
			log.Fatal(err)
		}
	}
	return buf.Bytes()
}

// write writes b, or its first cut bytes when cut > 0.
func write(name string, b []byte, cut int) {
	if cut > 0 {
		b = b[:cut]
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		log.Fatal(err)
	}
}

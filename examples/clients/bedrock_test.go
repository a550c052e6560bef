package clients_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What the fake Bedrock endpoint reports.
const (
	brInput, brOutput = 25, 12
	brModel           = "anthropic.claude-3-5-sonnet-20240620-v1:0"
)

var brDeltas = []string{"Hello", " from", " Bedrock"}

// converseEvents is a ConverseStream response: event type and JSON payload.
var converseEvents = [][2]string{
	{"messageStart", `{"role":"assistant"}`},
	{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Hello"}}`},
	{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":" from"}}`},
	{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":" Bedrock"}}`},
	{"contentBlockStop", `{"contentBlockIndex":0}`},
	{"messageStop", `{"stopReason":"end_turn"}`},
	{"metadata", `{"usage":{"inputTokens":25,"outputTokens":12,"totalTokens":37},"metrics":{"latencyMs":321}}`},
}

// anthropicEvents are the model's own events that InvokeModelWithResponseStream
// carries base64-encoded in chunk events; Bedrock adds its invocation
// metrics to the last.
var anthropicEvents = []string{
	`{"type":"message_start","message":{"id":"msg_bdrk_1","type":"message","role":"assistant","model":"claude-3-5-sonnet-20240620","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" from"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" Bedrock"}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":12}}`,
	`{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":25,"outputTokenCount":12,"invocationLatency":321,"firstByteLatency":98}}`,
}

// bedrockUpstream is a fake Bedrock runtime endpoint writing real AWS
// event-stream framing (prelude, headers, CRCs), one flushed message per
// event, and recording the bytes it sent.
type bedrockUpstream struct {
	mu   sync.Mutex
	sent bytes.Buffer
}

func eventMessage(eventType string, payload []byte) eventstream.Message {
	var h eventstream.Headers
	h.Set(":message-type", eventstream.StringValue("event"))
	h.Set(":event-type", eventstream.StringValue(eventType))
	h.Set(":content-type", eventstream.StringValue("application/json"))
	return eventstream.Message{Headers: h, Payload: payload}
}

func (u *bedrockUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	var msgs []eventstream.Message
	switch {
	case strings.HasSuffix(r.URL.Path, "/converse-stream"):
		for _, e := range converseEvents {
			msgs = append(msgs, eventMessage(e[0], []byte(e[1])))
		}
	case strings.HasSuffix(r.URL.Path, "/invoke-with-response-stream"):
		for _, e := range anthropicEvents {
			p, _ := json.Marshal(map[string]string{"bytes": base64.StdEncoding.EncodeToString([]byte(e))})
			msgs = append(msgs, eventMessage("chunk", p))
		}
		w.Header().Set("X-Amzn-Bedrock-Content-Type", "application/json")
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
	w.Header().Set("X-Amzn-Requestid", "5f1a3c1e-0000-4000-8000-000000000001")
	enc := eventstream.NewEncoder()
	for _, m := range msgs {
		var b bytes.Buffer
		if err := enc.Encode(&b, m); err != nil {
			panic(err) // a test fixture bug, not a runtime condition
		}
		u.mu.Lock()
		u.sent.Write(b.Bytes())
		u.mu.Unlock()
		_, _ = w.Write(b.Bytes())
		http.NewResponseController(w).Flush()
	}
}

func (u *bedrockUpstream) sentBytes() []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return bytes.Clone(u.sent.Bytes())
}

// bedrockGateway is llmrate (keyed by the SigV4 access key id) in front of
// the fake endpoint, and the AWS SDK's client pointed at it.
func bedrockGateway(t *testing.T) (*bedrockruntime.Client, *bedrockUpstream, *acceptEncoding, *reconciles) {
	t.Helper()
	up := &bedrockUpstream{}
	rec := newReconciles()
	lim, err := llmrate.New(llmrate.WithClock(fixedClock), llmrate.WithObserver(rec), llmrate.WithKey(sigV4AccessKey))
	require.NoError(t, err)
	gw := httptest.NewServer(lim.Middleware(up))
	t.Cleanup(gw.Close)
	tr := &acceptEncoding{base: gw.Client().Transport}
	client := bedrockruntime.New(bedrockruntime.Options{
		Region:       "eu-west-3",
		BaseEndpoint: aws.String(gw.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDGATEWAYTEST", SecretAccessKey: "not-a-secret", Source: "test"}, nil
		}),
		HTTPClient:       &http.Client{Transport: tr},
		RetryMaxAttempts: 1,
	})
	return client, up, tr, rec
}

func assertBedrockWire(t *testing.T, up *bedrockUpstream, tr *acceptEncoding) {
	t.Helper()
	raw, ce := tr.received()
	assert.Empty(t, ce)
	sent := up.sentBytes()
	require.NotEmpty(t, sent)
	assert.True(t, bytes.Equal(sent, raw), "the SDK received the endpoint's bytes unchanged (%d sent, %d received)", len(sent), len(raw))
}

func TestBedrockConverseStream(t *testing.T) {
	client, up, tr, rec := bedrockGateway(t)
	out, err := client.ConverseStream(context.Background(), &bedrockruntime.ConverseStreamInput{
		ModelId: aws.String(brModel),
		Messages: []types.Message{{
			Role:    types.ConversationRoleUser,
			Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "Say hello."}},
		}},
	})
	require.NoError(t, err)
	stream := out.GetStream()
	var deltas []string
	var usage *types.TokenUsage
	var stop types.StopReason
	for ev := range stream.Events() {
		switch v := ev.(type) {
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			if text, ok := v.Value.Delta.(*types.ContentBlockDeltaMemberText); ok {
				deltas = append(deltas, text.Value)
			}
		case *types.ConverseStreamOutputMemberMessageStop:
			stop = v.Value.StopReason
		case *types.ConverseStreamOutputMemberMetadata:
			usage = v.Value.Usage
		}
	}
	require.NoError(t, stream.Close())
	require.NoError(t, stream.Err())
	assert.Equal(t, brDeltas, deltas, "every text delta arrives")
	assert.Equal(t, types.StopReasonEndTurn, stop)
	require.NotNil(t, usage, "the metadata event arrives")
	assert.Equal(t, int32(brInput), aws.ToInt32(usage.InputTokens))
	assert.Equal(t, int32(brOutput), aws.ToInt32(usage.OutputTokens))
	assertBedrockWire(t, up, tr)

	// Waits for the event-stream decoder to be wired into the scanner.
	ev := rec.next(t)
	assert.Equal(t, llmrate.ReconcileUsage, ev.Kind, "reconcile kind")
	assert.Equal(t, int64(brInput+brOutput), ev.Actual, "charge")
	assert.Equal(t, llmrate.Usage{InputTokens: brInput, OutputTokens: brOutput}, ev.Reported)
	assert.NoError(t, ev.Undecoded, "the event stream was read whole")
}

func TestBedrockInvokeModelWithResponseStream(t *testing.T) {
	client, up, tr, rec := bedrockGateway(t)
	out, err := client.InvokeModelWithResponseStream(context.Background(), &bedrockruntime.InvokeModelWithResponseStreamInput{
		ModelId:     aws.String(brModel),
		ContentType: aws.String("application/json"),
		Accept:      aws.String("application/json"),
		Body:        []byte(`{"anthropic_version":"bedrock-2023-05-31","max_tokens":256,"messages":[{"role":"user","content":"Say hello."}]}`),
	})
	require.NoError(t, err)
	stream := out.GetStream()
	var chunks []string
	var deltas []string
	for ev := range stream.Events() {
		chunk, ok := ev.(*types.ResponseStreamMemberChunk)
		if !assert.True(t, ok, "unexpected event %T", ev) {
			continue
		}
		chunks = append(chunks, string(chunk.Value.Bytes))
		var e struct {
			Type  string `json:"type"`
			Delta struct {
				Text string `json:"text"`
			} `json:"delta"`
		}
		require.NoError(t, json.Unmarshal(chunk.Value.Bytes, &e))
		if e.Type == "content_block_delta" {
			deltas = append(deltas, e.Delta.Text)
		}
	}
	require.NoError(t, stream.Close())
	require.NoError(t, stream.Err())
	assert.Equal(t, anthropicEvents, chunks, "the model's events arrive unchanged")
	assert.Equal(t, brDeltas, deltas, "every text delta arrives")
	assertBedrockWire(t, up, tr)

	// Waits for the event-stream decoder to be wired into the scanner.
	ev := rec.next(t)
	assert.Equal(t, llmrate.ReconcileUsage, ev.Kind, "reconcile kind")
	assert.Equal(t, int64(brInput+brOutput), ev.Actual, "charge")
	assert.Equal(t, llmrate.Usage{InputTokens: brInput, OutputTokens: brOutput}, ev.Reported)
	assert.NoError(t, ev.Undecoded, "the event stream was read whole")
}

package usage_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmrate/llmrate/internal/usageref"
	"github.com/llmrate/llmrate/usage"
)

// shapeCase is a body and the usage worked out by hand from the rules in
// testdata/usage/README.md (§4.0 and the breakdown of docs/cost.md "What a response is charged").
type shapeCase struct {
	name, ct, body string
	want           usage.Usage
	reported       bool
}

func checkShapes(t *testing.T, cases []shapeCase) {
	t.Helper()
	for _, c := range cases {
		ref := usageref.Body(c.ct, []byte(c.body))
		refUsage := usage.Usage{InputTokens: ref.Input, OutputTokens: ref.Output, CachedInputTokens: ref.Cached, CacheWriteTokens: ref.CacheWrite, ReasoningTokens: ref.Reasoning}
		assert.Equal(t, c.reported, ref.Reported, "%s: reference reported", c.name)
		assert.Equal(t, c.want, refUsage, "%s: reference", c.name)
		for _, split := range []int{len(c.body), 7, 1} {
			got := scan(c.ct, "", []byte(c.body), split)
			assert.Equal(t, c.reported, got.Reported, "%s (split %d): reported", c.name, split)
			assert.Equal(t, c.want, got.Usage, "%s (split %d)", c.name, split)
		}
	}
}

const js = "application/json"

// TestCompactionIterations: Anthropic usage.iterations: the top-level
// report plus every compaction iteration, nothing else.
func TestCompactionIterations(t *testing.T) {
	t.Parallel()
	it := func(iters string) string {
		return `{"type":"message","usage":{"input_tokens":10,"cache_read_input_tokens":1,"output_tokens":20,"iterations":[` + iters + `]}}`
	}
	checkShapes(t, []shapeCase{
		{"the top level plus the compaction", js, it(`{"type":"compaction","input_tokens":100,"cache_read_input_tokens":5,"output_tokens":7},{"type":"message","input_tokens":10,"cache_creation_input_tokens":3,"output_tokens":20}`),
			usage.Usage{InputTokens: 10 + 1 + 100 + 5, OutputTokens: 20 + 7, CachedInputTokens: 1 + 5}, true},
		{"advisor and untyped iterations are not added", js, it(`{"type":"advisor_message","input_tokens":9000,"output_tokens":900},{"input_tokens":8000},{"type":"message","input_tokens":10,"output_tokens":20},{"type":"Message","input_tokens":7000}`),
			usage.Usage{InputTokens: 11, OutputTokens: 20, CachedInputTokens: 1}, true},
		{"a type spelled with an escape counts", js, it(`{"type":"comp\u0061ction","input_tokens":4,"output_tokens":2},{"type":"message","input_tokens":10,"output_tokens":20}`),
			usage.Usage{InputTokens: 11 + 4, OutputTokens: 20 + 2, CachedInputTokens: 1}, true},
		{"the last type member wins", js, it(`{"type":"compaction","type":"advisor_message","input_tokens":500},{"type":1,"type":"compaction","input_tokens":6}`),
			usage.Usage{InputTokens: 10 + 1 + 6, OutputTokens: 20, CachedInputTokens: 1}, true},
		{"a malformed count in a counted iteration rejects the report", js, it(`{"type":"compaction","input_tokens":-1},{"type":"message","input_tokens":10,"output_tokens":20}`),
			usage.Usage{}, false},
		{"a malformed count elsewhere is not read", js, it(`{"type":"advisor_message","input_tokens":"many"},{"type":"message","input_tokens":10,"output_tokens":20,"server_tool_use":{"input_tokens":1.5}}`),
			usage.Usage{InputTokens: 11, OutputTokens: 20, CachedInputTokens: 1}, true},
		{"a malformed top-level count still rejects", js, `{"usage":{"input_tokens":10,"output_tokens":1e3,"iterations":[{"type":"message","input_tokens":10,"output_tokens":20}]}}`,
			usage.Usage{}, false},
		{"no counted iteration: the top-level counts", js, it(`{"type":"advisor_message","input_tokens":9000}`),
			usage.Usage{InputTokens: 11, OutputTokens: 20, CachedInputTokens: 1}, true},
		{"iterations that are not an array: the top-level counts", js, `{"usage":{"input_tokens":3,"output_tokens":4,"iterations":{"type":"compaction","input_tokens":99}}}`,
			usage.Usage{InputTokens: 3, OutputTokens: 4}, true},
		{"a repeated iterations member replaces the first", js, `{"usage":{"input_tokens":3,"output_tokens":4,"iterations":[{"type":"compaction","input_tokens":99}],"iterations":null}}`,
			usage.Usage{InputTokens: 3, OutputTokens: 4}, true},
		{"a field no counted iteration carries stays as kept", "text/event-stream",
			"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":64,\"output_tokens\":1}}}\n\n" +
				"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9,\"iterations\":[{\"type\":\"compaction\",\"input_tokens\":50,\"output_tokens\":3},{\"type\":\"message\",\"input_tokens\":5,\"output_tokens\":9}]}}\n\n",
			usage.Usage{InputTokens: 55 + 64, OutputTokens: 12, CachedInputTokens: 64}, true},
		{"iterations inside a tool input are not usage", js, `{"content":[{"type":"tool_use","input":{"usage":{"input_tokens":1,"iterations":[{"type":"compaction","input_tokens":777}]}}}],"usage":{"input_tokens":3,"output_tokens":4}}`,
			usage.Usage{InputTokens: 3, OutputTokens: 4}, true},
		{"sums saturate", js, it(`{"type":"compaction","input_tokens":9223372036854775807},{"type":"message","input_tokens":10,"output_tokens":20}`),
			usage.Usage{InputTokens: 1<<63 - 1, OutputTokens: 20, CachedInputTokens: 1}, true},
		{"model fallback: the top level alone, output included", js, it(`{"type":"message","model":"a","input_tokens":4000,"cache_read_input_tokens":700,"output_tokens":3},{"type":"fallback_message","model":"b","input_tokens":10,"cache_read_input_tokens":1,"output_tokens":20}`),
			usage.Usage{InputTokens: 11, OutputTokens: 20, CachedInputTokens: 1}, true},
		{"compaction, then a fallback: the top level plus the compaction", js, it(`{"type":"compaction","input_tokens":300,"cache_creation_input_tokens":2,"output_tokens":40},{"type":"message","model":"a","input_tokens":4000,"output_tokens":0},{"type":"fallback_message","model":"b","input_tokens":10,"cache_read_input_tokens":1,"output_tokens":20}`),
			usage.Usage{InputTokens: 11 + 302, OutputTokens: 60, CachedInputTokens: 1, CacheWriteTokens: 2}, true},
		{"a malformed count in a message iteration is not read", js, it(`{"type":"message","input_tokens":-4},{"type":"fallback_message","input_tokens":"x"}`),
			usage.Usage{InputTokens: 11, OutputTokens: 20, CachedInputTokens: 1}, true},
		{"a fallback while streaming: message_start, then the delta's top level", "text/event-stream",
			"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":30,\"cache_read_input_tokens\":8,\"output_tokens\":1}}}\n\n" +
				"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":77,\"iterations\":[{\"type\":\"message\",\"input_tokens\":900,\"output_tokens\":0},{\"type\":\"fallback_message\",\"input_tokens\":30,\"output_tokens\":77}]}}\n\n",
			usage.Usage{InputTokens: 38, OutputTokens: 77, CachedInputTokens: 8}, true},
		{"nested in a top-level array, as deep as a Responses report", js, `[{"type":"response.completed","response":{"usage":{"input_tokens":1,"output_tokens":1,"iterations":[{"type":"compaction","input_tokens":40,"output_tokens":2},{"type":"message","input_tokens":1,"output_tokens":1}]}}}]`,
			usage.Usage{InputTokens: 41, OutputTokens: 3}, true},
	})
}

// TestXAIReasoning: reasoning is added to completion_tokens only where
// total_tokens says it is outside it.
func TestXAIReasoning(t *testing.T) {
	t.Parallel()
	oa := func(u string) string { return `{"choices":[],"usage":{` + u + `}}` }
	checkShapes(t, []shapeCase{
		{"xAI: total = prompt + completion + reasoning", js, oa(`"prompt_tokens":32,"completion_tokens":1,"total_tokens":323,"completion_tokens_details":{"reasoning_tokens":290}`),
			usage.Usage{InputTokens: 32, OutputTokens: 291, ReasoningTokens: 290}, true},
		{"OpenAI: total = prompt + completion", js, oa(`"prompt_tokens":32,"completion_tokens":291,"total_tokens":323,"completion_tokens_details":{"reasoning_tokens":290}`),
			usage.Usage{InputTokens: 32, OutputTokens: 291, ReasoningTokens: 290}, true},
		{"total adds up to neither: the OpenAI rule, reasoning held to the output", js, oa(`"prompt_tokens":40,"completion_tokens":50,"total_tokens":400,"completion_tokens_details":{"reasoning_tokens":300}`),
			usage.Usage{InputTokens: 40, OutputTokens: 50, ReasoningTokens: 50}, true},
		{"reasoning 0 changes nothing", js, oa(`"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"completion_tokens_details":{"reasoning_tokens":0}`),
			usage.Usage{InputTokens: 3, OutputTokens: 4}, true},
		{"no total_tokens: the OpenAI rule", js, oa(`"prompt_tokens":3,"completion_tokens":4,"completion_tokens_details":{"reasoning_tokens":5}`),
			usage.Usage{InputTokens: 3, OutputTokens: 4, ReasoningTokens: 4}, true},
		{"a malformed total_tokens rejects nothing", js, oa(`"prompt_tokens":3,"completion_tokens":4,"total_tokens":"12","completion_tokens_details":{"reasoning_tokens":5}`),
			usage.Usage{InputTokens: 3, OutputTokens: 4, ReasoningTokens: 4}, true},
		{"a sum past int64 never equals a total", js, oa(`"prompt_tokens":9223372036854775807,"completion_tokens":1,"total_tokens":9223372036854775807,"completion_tokens_details":{"reasoning_tokens":9223372036854775807}`),
			usage.Usage{InputTokens: 1<<63 - 1, OutputTokens: 1, ReasoningTokens: 1}, true},
		{"details look-alikes outside the report", js, `{"choices":[{"message":{"content":"x","completion_tokens_details":{"reasoning_tokens":900}}}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":907}}`,
			usage.Usage{InputTokens: 3, OutputTokens: 4}, true},
	})
}

// TestInteractionsAndEmbeddings: the Gemini Interactions usage and Vertex
// AI's embedding statistics.
func TestInteractionsAndEmbeddings(t *testing.T) {
	t.Parallel()
	const sse = "text/event-stream"
	itUsage := `"usage":{"total_input_tokens":10,"total_tool_use_tokens":2,"total_output_tokens":5,"total_thought_tokens":7,"total_cached_tokens":4}`
	pred := func(n string) string { return `{"embeddings":{"statistics":{"token_count":` + n + `}}}` }
	checkShapes(t, []shapeCase{
		{"interaction object", js, `{"object":"interaction",` + itUsage + `}`,
			usage.Usage{InputTokens: 12, OutputTokens: 12, CachedInputTokens: 4, ReasoningTokens: 7}, true},
		{"interaction.completed", sse, `data: {"event_type":"interaction.completed","interaction":{` + itUsage + `}}` + "\n\n",
			usage.Usage{InputTokens: 12, OutputTokens: 12, CachedInputTokens: 4, ReasoningTokens: 7}, true},
		{"other events' interaction.usage is not read", sse, `data: {"event_type":"interaction.start","interaction":{` + itUsage + `}}` + "\n\n" +
			`data: {"interaction":{` + itUsage + `}}` + "\n\n" + `data: {"event_type":"interaction.completedx","interaction":{` + itUsage + `}}` + "\n\n",
			usage.Usage{}, false},
		{"a malformed counted field rejects the report", js, `{"usage":{"total_input_tokens":10,"total_output_tokens":-5}}`, usage.Usage{}, false},
		{"a malformed total_cached_tokens does not", js, `{"usage":{"total_input_tokens":10,"total_output_tokens":5,"total_cached_tokens":2.5}}`,
			usage.Usage{InputTokens: 10, OutputTokens: 5}, true},
		{"embeddings", js, `{"predictions":[` + pred("6") + `,` + pred("11") + `,` + pred("9") + `]}`, usage.Usage{InputTokens: 26}, true},
		{"a malformed token_count rejects the predictions", js, `{"predictions":[` + pred("6") + `,` + pred(`"11"`) + `]}`, usage.Usage{}, false},
		{"last member wins inside a prediction", js, `{"predictions":[{"embeddings":{"statistics":{"token_count":5,"token_count":6}}},{"embeddings":{"statistics":{"token_count":500}},"embeddings":{"values":[]}},{"embeddings":{"statistics":{"token_count":500},"statistics":null}}]}`,
			usage.Usage{InputTokens: 6}, true},
		{"predictions that are not an array", js, `{"predictions":{"embeddings":{"statistics":{"token_count":5}}}}`, usage.Usage{}, false},
		{"predictions with no counts", js, `{"predictions":[{"embeddings":{"values":[0.1]}},7,[` + pred("9") + `]]}`, usage.Usage{}, false},
		{"a repeated predictions member replaces the first", js, `{"predictions":[` + pred("6") + `],"predictions":[` + pred("8") + `]}`, usage.Usage{InputTokens: 8}, true},
	})
}

// TestBreakdown: the cache and reasoning fields of every shape (docs/cost.md
// "What a response is charged"), combined across reports like the counted fields, never rejecting
// one and never more than the total they are part of.
func TestBreakdown(t *testing.T) {
	t.Parallel()
	const sse = "text/event-stream"
	checkShapes(t, []shapeCase{
		{"OpenAI cached and reasoning", js, `{"usage":{"prompt_tokens":100,"completion_tokens":50,"prompt_tokens_details":{"cached_tokens":64},"completion_tokens_details":{"reasoning_tokens":30}}}`,
			usage.Usage{InputTokens: 100, OutputTokens: 50, CachedInputTokens: 64, ReasoningTokens: 30}, true},
		{"DeepSeek's hit count when details have none", js, `{"usage":{"prompt_tokens":100,"completion_tokens":50,"prompt_cache_hit_tokens":70,"prompt_tokens_details":{"cached_tokens":null}}}`,
			usage.Usage{InputTokens: 100, OutputTokens: 50, CachedInputTokens: 70}, true},
		{"details first when both are there", js, `{"usage":{"prompt_tokens":100,"completion_tokens":50,"prompt_cache_hit_tokens":70,"prompt_tokens_details":{"cached_tokens":64}}}`,
			usage.Usage{InputTokens: 100, OutputTokens: 50, CachedInputTokens: 64}, true},
		{"Responses details", js, `{"usage":{"input_tokens":100,"output_tokens":50,"input_tokens_details":{"cached_tokens":64},"output_tokens_details":{"reasoning_tokens":30}}}`,
			usage.Usage{InputTokens: 100, OutputTokens: 50, CachedInputTokens: 64, ReasoningTokens: 30}, true},
		{"Anthropic cache read and write", js, `{"usage":{"input_tokens":10,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":5}}`,
			usage.Usage{InputTokens: 60, OutputTokens: 5, CachedInputTokens: 30, CacheWriteTokens: 20}, true},
		{"Bedrock, primary names over aliases", js, `{"usage":{"inputTokens":10,"outputTokens":5,"cacheReadInputTokens":7,"cacheReadInputTokenCount":7,"cacheWriteInputTokenCount":3}}`,
			usage.Usage{InputTokens: 20, OutputTokens: 5, CachedInputTokens: 7, CacheWriteTokens: 3}, true},
		{"Bedrock invocation metrics", js, `{"amazon-bedrock-invocationMetrics":{"inputTokenCount":10,"outputTokenCount":5,"cacheReadInputTokenCount":6,"cacheWriteInputTokenCount":4}}`,
			usage.Usage{InputTokens: 20, OutputTokens: 5, CachedInputTokens: 6, CacheWriteTokens: 4}, true},
		{"Gemini", js, `{"usageMetadata":{"promptTokenCount":100,"cachedContentTokenCount":80,"candidatesTokenCount":10,"thoughtsTokenCount":40}}`,
			usage.Usage{InputTokens: 100, OutputTokens: 50, CachedInputTokens: 80, ReasoningTokens: 40}, true},
		{"a malformed breakdown field rejects nothing and counts 0", js, `{"usage":{"prompt_tokens":100,"completion_tokens":50,"prompt_tokens_details":{"cached_tokens":-1},"completion_tokens_details":{"reasoning_tokens":"30"}}}`,
			usage.Usage{InputTokens: 100, OutputTokens: 50}, true},
		{"a rejected report's breakdown is not kept", js, `{"usage":{"prompt_tokens":100,"completion_tokens":5.5,"prompt_tokens_details":{"cached_tokens":64}}}`,
			usage.Usage{}, false},
		{"last value wins per field; a malformed one keeps the earlier", sse,
			"data: {\"usage\":{\"prompt_tokens\":100,\"prompt_tokens_details\":{\"cached_tokens\":64},\"completion_tokens_details\":{\"reasoning_tokens\":3}}}\n\n" +
				"data: {\"usage\":{\"completion_tokens\":50,\"prompt_tokens_details\":{\"cached_tokens\":true},\"completion_tokens_details\":{\"reasoning_tokens\":30}}}\n\n",
			usage.Usage{InputTokens: 100, OutputTokens: 50, CachedInputTokens: 64, ReasoningTokens: 30}, true},
		{"a breakdown above its total is held to it", js, `{"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":64},"completion_tokens_details":{"reasoning_tokens":30}}}`,
			usage.Usage{InputTokens: 10, OutputTokens: 5, CachedInputTokens: 10, ReasoningTokens: 5}, true},
		{"details objects repeated: the last wins", js, `{"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4},"prompt_tokens_details":{}}}`,
			usage.Usage{InputTokens: 10, OutputTokens: 5}, true},
	})
}

// TestShapesRandomAgainstReference: documents built at random from the
// members the new rules read (iterations of any type, details objects,
// xAI's totals, Interactions counts, predictions), with values valid,
// malformed, null or repeated, and wrapped in the paths that hold reports,
// read as the encoding/json reference reads them, in every split.
func TestShapesRandomAgainstReference(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(23, 17))
	num := func() string {
		if r.IntN(6) == 0 { // malformed or null
			return []string{"-1", "1.5", "1e2", `"4"`, "null", "true", "{}"}[r.IntN(7)]
		}
		return []string{"0", "3", "17", "290", "9223372036854775807"}[r.IntN(5)]
	}
	pick := func(names ...string) string { return names[r.IntN(len(names))] }
	var member func(depth int) string
	object := func(depth int) string {
		var b strings.Builder
		b.WriteByte('{')
		for i := range r.IntN(5) {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(member(depth + 1))
		}
		b.WriteByte('}')
		return b.String()
	}
	array := func(depth int) string {
		var b strings.Builder
		b.WriteByte('[')
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteByte(',')
			}
			switch r.IntN(6) {
			case 0:
				b.WriteString(num())
			case 1, 2: // an element as the rules read it, plus whatever follows
				inner := object(depth + 1)
				lead := pick(`"type":"compaction","input_tokens":`, `"type":"message","output_tokens":`, `"type":"advisor_message","input_tokens":`,
					`"embeddings":{"statistics":{"token_count":`+num()+`}},"x":`) + num()
				if inner == "{}" {
					b.WriteString("{" + lead + "}")
				} else {
					b.WriteString("{" + lead + "," + inner[1:])
				}
			default:
				b.WriteString(object(depth + 1))
			}
		}
		b.WriteByte(']')
		return b.String()
	}
	member = func(depth int) string {
		name := pick("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
			"prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens", "reasoning_tokens", "prompt_cache_hit_tokens",
			"total_input_tokens", "total_output_tokens", "total_thought_tokens", "total_tool_use_tokens", "total_cached_tokens",
			"token_count", "type", "iterations", "prompt_tokens_details", "completion_tokens_details", "input_tokens_details",
			"output_tokens_details", "embeddings", "statistics", "text")
		var v string
		switch {
		case name == "type":
			v = pick(`"compaction"`, `"message"`, `"advisor_message"`, `"mess\u0061ge"`, `1`, `null`)
		case depth > 5:
			v = num()
		case name == "iterations" || r.IntN(8) == 0:
			v = array(depth)
		case strings.HasSuffix(name, "_details") && r.IntN(2) == 0:
			v = `{"` + pick("cached_tokens", "reasoning_tokens") + `":` + num() + `}`
		case strings.HasSuffix(name, "_details") || name == "embeddings" || name == "statistics" || r.IntN(8) == 0:
			v = object(depth)
		default:
			v = num()
		}
		return `"` + name + `":` + v
	}
	statReported, statBreakdown := 0, 0
	defer func() {
		// The generator must keep making reports, breakdowns included.
		assert.Greater(t, statReported, 1000)
		assert.Greater(t, statBreakdown, 100)
		t.Logf("reported %d, with a breakdown %d", statReported, statBreakdown)
	}()
	for range 3000 {
		report := object(1)
		lead := `"` + pick("input_tokens", "output_tokens", "prompt_tokens", "completion_tokens", "total_input_tokens", "total_output_tokens") + `":` + num()
		if report == "{}" {
			report = "{" + lead + "}"
		} else {
			report = "{" + lead + "," + report[1:]
		}
		var doc string
		switch r.IntN(6) {
		case 0:
			doc = `{"usage":` + report + `}`
		case 1:
			doc = `{"type":"message_delta","usage":` + report + `,"usage":` + object(1) + `}`
		case 2:
			doc = `{"event_type":"` + pick("interaction.completed", "interaction.start") + `","interaction":{"usage":` + report + `}}`
		case 3:
			doc = `{"predictions":` + array(1) + `}`
		case 4:
			doc = `[{"type":"response.completed","response":{"usage":` + report + `}},{"usage":` + object(1) + `}]`
		default:
			doc = `{"choices":[],"usage":` + report + `,"usageMetadata":` + object(1) + `}`
		}
		if ref := usageref.Body("application/json", []byte(doc)); ref.Reported {
			statReported++
			if ref.Cached > 0 || ref.Reasoning > 0 || ref.CacheWrite > 0 {
				statBreakdown++
			}
		}
		checkAgainstRef(t, "application/json", []byte(doc), uint8(1+r.IntN(40)))
		checkAgainstRef(t, "text/event-stream", []byte("data: "+doc+"\n\n"), uint8(1+r.IntN(40)))
	}
}

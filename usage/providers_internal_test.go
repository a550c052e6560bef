package usage

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// rowEvent builds an SSE event holding a valid report at row s of paths,
// from the row alone.
func rowEvent(s slot) string {
	p := paths[s]
	var report string
	switch p.style {
	case styleCohere:
		report = `{"billed_units":{"input_tokens":3,"output_tokens":4}}`
	case styleGemini:
		report = `{"promptTokenCount":3,"candidatesTokenCount":4}`
	case styleOllama:
		report = `"prompt_eval_count":3,"eval_count":4`
	case styleInvocationMetrics:
		report = `{"inputTokenCount":3,"outputTokenCount":4}`
	case styleVertexEmbed:
		report = `[{"embeddings":{"statistics":{"token_count":3}}}]` // input only
	default:
		report = `{"prompt_tokens":3,"completion_tokens":4}`
	}
	if p.sub != "" {
		report = `{"` + p.sub + `":` + report + `}`
	}
	doc := `"` + p.member + `":` + report
	if p.member == "" {
		doc = report
	}
	switch p.when {
	case typeIs:
		doc += `,"type":"` + p.arg + `"`
	case typePrefix:
		doc += `,"type":"` + p.arg + `x"`
	case doneTrue:
		doc += `,"done":true`
	case eventTypeIs:
		doc += `,"event_type":"` + p.arg + `"`
	}
	return "event: e\ndata: {" + doc + "}\n\n"
}

// TestEveryRowReadsAndIsNeverSkipped: a report at any row of the provider
// table is read, whole in one write (where the skip fast path runs) and
// byte by byte; so a row whose markers were forgotten fails here, not in
// production on the fast path only.
func TestEveryRowReadsAndIsNeverSkipped(t *testing.T) {
	for s := slotXGroq; s < numSlots; s++ {
		ev := rowEvent(s)
		assert.Zero(t, skippableEvent([]byte(ev)), "row %d skipped: %s", s, ev)
		for _, split := range []int{len(ev), 1} {
			sc := NewScanner("text/event-stream", "")
			for b := []byte(ev); len(b) > 0; b = b[min(split, len(b)):] {
				_, _ = sc.Write(b[:min(split, len(b))])
			}
			r := sc.Finish()
			assert.True(t, r.Reported, "row %d, split %d: %s", s, split, ev)
			want := Usage{InputTokens: 3, OutputTokens: 4}
			if paths[s].style == styleVertexEmbed {
				want.OutputTokens = 0 // embeddings generate nothing
			}
			assert.Equal(t, want, r.Usage, "row %d: %s", s, ev)
			assert.Equal(t, !paths[s].partial, r.Final, "row %d: %s", s, ev)
		}
	}
}

// TestEveryTextMemberCounts: every text member's string is counted at any
// depth, in an event the skip fast path sees whole.
func TestEveryTextMemberCounts(t *testing.T) {
	for _, m := range textMembers {
		ev := `data: {"a":[{"b":{"` + m + `":"abcdé"}}]}` + "\n\n"
		assert.Zero(t, skippableEvent([]byte(ev)), m)
		sc := NewScanner("text/event-stream", "")
		_, _ = sc.Write([]byte(ev))
		assert.Equal(t, int64(len("abcdé")), sc.Finish().GeneratedBytes, m)
	}
	// Look-alikes are not text: other names, non-string values, keys.
	sc := NewScanner("text/event-stream", "")
	_, _ = sc.Write([]byte(`data: {"contents":"x","text":{"v":"y"},"delta":["z"],"role":"content"}` + "\n\n"))
	assert.Zero(t, sc.Finish().GeneratedBytes)
}

package llmrate

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func filterAll(t *testing.T, stream string, chunk func(int) int) string {
	t.Helper()
	var out bytes.Buffer
	var f usageFilter
	w := func(b []byte) (int, error) { return out.Write(b) }
	b := []byte(stream)
	for i := 0; len(b) > 0; i++ {
		n := min(len(b), max(1, chunk(i)))
		require.NoError(t, f.write(b[:n], w))
		b = b[n:]
	}
	f.flush(w)
	return out.String()
}

// TestUsageFilterSplits: whatever the write boundaries and line breaks,
// exactly the usage-only chunk is dropped and every other byte passes.
func TestUsageFilterSplits(t *testing.T) {
	for _, nl := range []string{"\n", "\r\n"} {
		ev := func(data string) string { return "data: " + data + nl + nl }
		keep := ev(`{"choices":[{"delta":{"content":"a \"usage\": {} b"}}],"usage":null}`) +
			": comment" + nl + nl +
			"event: x" + nl + "data: {\"choices\":[{\"delta\":{}}]," + nl + "data: \"usage\":null}" + nl + nl
		drop := ev(`{"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11}}`)
		done := ev("[DONE]")
		stream := keep + drop + done
		r := rand.New(rand.NewPCG(1, 2))
		for name, chunk := range map[string]func(int) int{
			"whole":  func(int) int { return len(stream) },
			"1-byte": func(int) int { return 1 },
			"random": func(int) int { return 1 + r.IntN(40) },
		} {
			assert.Equal(t, keep+done, filterAll(t, stream, chunk), "%q %s", nl, name)
		}
	}
}

// TestUsageFilterOversizedAndCut: an event over the hold limit passes
// through untouched; a stream cut mid-event forwards what it held.
func TestUsageFilterOversizedAndCut(t *testing.T) {
	big := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1},\"pad\":\"" + strings.Repeat("x", 2*maxHeldEvent) + "\"}\n\n"
	assert.Equal(t, big, filterAll(t, big, func(int) int { return 1000 }), "an oversized event is not held back, so not dropped")
	cut := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choi"
	assert.Equal(t, cut, filterAll(t, cut, func(int) int { return 7 }))
}

func TestEventEnd(t *testing.T) {
	cases := map[string]int{
		"data: a\n\nrest":     9,
		"data: a\r\n\r\nrest": 11,
		"data: a\r\rrest":     9,
		"data: a\n":           -1,
		"data: a\r":           -1,
		"data: a\r\n\r":       -1, // the last CR may start a CRLF
		"\nx":                 1,
	}
	for in, want := range cases {
		assert.Equal(t, want, eventEnd([]byte(in)), "%q", in)
		assert.Equal(t, want, fastEventEnd([]byte(in)), "fast %q", in)
	}
	// The two agree on every input: random streams of the bytes that matter.
	r := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = "\r\nd:x"[r.IntN(5)]
		}
		require.Equal(t, eventEnd(b), fastEventEnd(b), "%q", b)
	}
}

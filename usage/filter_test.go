package usage_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/llmrate/llmrate/usage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func filterAll(t *testing.T, stream string, chunk func(int) int) string {
	t.Helper()
	out, _ := filterScan(t, stream, chunk)
	return out
}

// filterScan passes stream through a Filter in writes of chunk(i) bytes and
// returns what the client got and what the scanner found.
func filterScan(t *testing.T, stream string, chunk func(int) int) (string, usage.Result) {
	t.Helper()
	var out bytes.Buffer
	var f usage.Filter
	s := usage.NewScanner("text/event-stream", "")
	f.Reset(s, out.Write)
	b := []byte(stream)
	for i := 0; len(b) > 0; i++ {
		n := min(len(b), max(1, chunk(i)))
		w, err := f.Write(b[:n])
		require.NoError(t, err)
		require.Equal(t, n, w)
		b = b[n:]
	}
	require.NoError(t, f.Flush())
	return out.String(), s.Finish()
}

// TestUsageFilterSplits: whatever the write boundaries and line breaks,
// exactly the usage-only chunk is dropped and every other byte passes, and
// the scanner sees every byte once.
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
			got, res := filterScan(t, stream, chunk)
			assert.Equal(t, keep+done, got, "%q %s", nl, name)
			assert.Equal(t, usage.Usage{InputTokens: 5, OutputTokens: 6}, res.Usage, "the dropped chunk's usage is still read, %q %s", nl, name)
			assert.Equal(t, int64(len(`a "usage": {} b`)), res.GeneratedBytes, "every byte is scanned once, %q %s", nl, name)
		}
	}
}

// TestUsageFilterOversizedAndCut: an event over the hold limit (64 KiB)
// passes through untouched; a stream cut mid-event forwards what it held.
func TestUsageFilterOversizedAndCut(t *testing.T) {
	big := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1},\"pad\":\"" + strings.Repeat("x", 2*64<<10) + "\"}\n\n"
	assert.Equal(t, big, filterAll(t, big, func(int) int { return 1000 }), "an oversized event is not held back, so not dropped")
	cut := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choi"
	assert.Equal(t, cut, filterAll(t, cut, func(int) int { return 7 }))
}

// TestUsageFilterOutputError: a failed client write is reported as the
// Write's error, and the scanner still saw the event.
func TestUsageFilterOutputError(t *testing.T) {
	var f usage.Filter
	s := usage.NewScanner("text/event-stream", "")
	f.Reset(s, func([]byte) (int, error) { return 0, io.ErrClosedPipe })
	n, err := f.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"))
	assert.Zero(t, n)
	assert.ErrorIs(t, err, io.ErrClosedPipe)
	assert.Equal(t, int64(2), s.Finish().GeneratedBytes)
}

// TestUsageFilterOversizedEventContinues: an event over the 64 KiB hold
// bound is passed through as it comes; when a write ends inside one of its
// lines and the next write starts with that line's break, the data line
// after it still belongs to the same event, however much it looks like a
// usage-only chunk on its own: nothing of it may be dropped. Every split
// of the tail is tried, CRLF and LF, including the ones that cut a CRLF.
func TestUsageFilterOversizedEventContinues(t *testing.T) {
	usageOnly := `{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`
	for _, nl := range []string{"\n", "\r\n"} {
		big := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("a", 70<<10) + "\"}}]}"
		stream := big + nl + "data: " + usageOnly + nl + nl + "data: [DONE]" + nl + nl
		for cut := len(big) - 2; cut <= len(big)+len(nl)+8; cut++ {
			var out bytes.Buffer
			var f usage.Filter
			f.Reset(usage.NewScanner("text/event-stream", ""), out.Write)
			for _, w := range []string{stream[:cut], stream[cut:]} {
				_, err := f.Write([]byte(w))
				require.NoError(t, err)
			}
			require.NoError(t, f.Flush())
			require.Equal(t, len(stream), out.Len(), "line break %q, write cut at %d: the client must get every byte of the one event", nl, cut)
			require.Equal(t, stream, out.String())
		}
	}
}

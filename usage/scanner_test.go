package usage_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"

	"github.com/llmrate/llmrate/internal/usageref"
	"github.com/llmrate/llmrate/usage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gunzip returns a fixture's decoded body (the reference reads that).
func gunzip(t testing.TB, f fixture, body []byte) []byte {
	t.Helper()
	if f.ContentEncoding != "gzip" {
		return body
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	require.NoError(t, err)
	out, err := io.ReadAll(zr)
	require.NoError(t, err)
	return out
}

// TestScannerFixtures: every fixture, in every write split, reports the
// manifest's usage and the encoding/json reference's generated text.
func TestScannerFixtures(t *testing.T) {
	t.Parallel()
	for _, f := range loadFixtures(t) {
		t.Run(f.File, func(t *testing.T) {
			t.Parallel()
			body := readFixture(t, f)
			want, wantOK := wantUsage(f)
			ref := usageref.Body(f.ContentType, gunzip(t, f, body))
			for name, chunks := range splits(body, uint64(len(body))) {
				if name == "1-byte" && len(body) > 1<<20 {
					continue // the 5 MB stream is cut finely by "random" already
				}
				s := usage.NewScanner(f.ContentType, f.ContentEncoding)
				for _, c := range chunks {
					_, _ = s.Write(c)
				}
				got := s.Finish()
				assert.Equal(t, wantOK, got.Reported, "%s: usage reported (%s)", name, f.Note)
				assert.Equal(t, want, got.Usage, "%s: usage (%s)", name, f.Note)
				assert.Equal(t, ref.Gen, got.GeneratedBytes, "%s: generated text (%s)", name, f.Note)
				assert.Equal(t, ref.Final, got.Final, "%s: final (%s)", name, f.Note)
			}
		})
	}
}

// TestScanMemoryBounded: scanning a long content-delta stream allocates
// nothing per event, so its memory does not grow with the stream.
func TestScanMemoryBounded(t *testing.T) {
	event := []byte("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" the usage \\\"prompt_tokens\\\": 99 is not here\"},\"finish_reason\":null}]}\n\n")
	block := bytes.Repeat(event, 4096) // ~900 KB
	const total = 32 << 20
	s := usage.NewScanner("text/event-stream", "")
	writes := 0
	allocs := testing.AllocsPerRun(1, func() {
		for n := 0; n < total; n += len(block) {
			_, _ = s.Write(block)
			writes++
		}
	})
	_, _ = s.Write([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":8}}\n\n"))
	got := s.Finish()
	require.True(t, got.Reported)
	assert.Equal(t, usage.Usage{InputTokens: 7, OutputTokens: 8}, got.Usage)
	text := int64(len(" the usage \"prompt_tokens\": 99 is not here"))
	assert.Equal(t, text*4096*int64(writes), got.GeneratedBytes, "every event's text is counted")
	assert.Zero(t, allocs, "scanning 32 MB of events allocated")
}

// TestScannerClosed: a closed scanner only counts what it is given.
func TestScannerClosed(t *testing.T) {
	t.Parallel()
	ev := []byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n")
	s := usage.NewScanner("text/event-stream", "")
	s.Close()
	_, _ = s.Write(ev)
	got := s.Finish()
	assert.False(t, got.Reported)
	assert.Equal(t, int64(len(ev)), got.Bytes)
	assert.Equal(t, usage.FramingNone, s.Framing())
}

// TestFramingForContentType: the framing follows the media type whatever
// its case, its surrounding spaces and its parameters; a type of another
// length, or the same length but another name, is not scanned.
func TestFramingForContentType(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]usage.Framing{
		"application/json":                               usage.FramingJSON,
		"Application/JSON; charset=utf-8":                usage.FramingJSON,
		" application/json ;x=y":                         usage.FramingJSON,
		"text/event-stream":                              usage.FramingSSE,
		"TEXT/Event-Stream; charset=utf-8":               usage.FramingSSE,
		"application/x-ndjson":                           usage.FramingNDJSON,
		"Application/X-NDJSON ; charset=utf-8":           usage.FramingNDJSON,
		"application/vnd.amazon.eventstream":             usage.FramingEventStream,
		"APPLICATION/VND.AMAZON.EVENTSTREAM;v=1":         usage.FramingEventStream,
		"text/plain":                                     usage.FramingNone,
		"application/jsonx":                              usage.FramingNone,
		"application/josn":                               usage.FramingNone, // same length, another name
		"text/event-streaX":                              usage.FramingNone,
		"application/x-ndjsoN2":                          usage.FramingNone,
		"application/vnd.amazon.eventstreaM":             usage.FramingEventStream,
		"application/vnd.amazon.eventstrean":             usage.FramingNone,
		"":                                               usage.FramingNone,
		"application/problem+json; charset=utf-8":        usage.FramingNone,
		"multipart/form-data; boundary=application/json": usage.FramingNone,
	} {
		assert.Equal(t, want, usage.NewScanner(ct, "").Framing(), "%q", ct)
	}
}

// BenchmarkScan100MB: memory for scanning a 100 MB stream (B/op is the whole
// run's allocation).
func BenchmarkScan100MB(b *testing.B) {
	block := bytes.Repeat(sseEvent, 4096)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s := usage.NewScanner("text/event-stream", "")
		for n := 0; n < 100<<20; n += len(block) {
			_, _ = s.Write(block)
		}
		s.Finish()
	}
}

// TestReferenceFixtures: the encoding/json reference, which the fuzz
// targets trust, reads every fixture as its manifest says, breakdown
// included.
func TestReferenceFixtures(t *testing.T) {
	t.Parallel()
	for _, f := range loadFixtures(t) {
		ref := usageref.Body(f.ContentType, gunzip(t, f, readFixture(t, f)))
		want, wantOK := wantUsage(f)
		got := usage.Usage{InputTokens: ref.Input, OutputTokens: ref.Output, CachedInputTokens: ref.Cached, CacheWriteTokens: ref.CacheWrite, ReasoningTokens: ref.Reasoning}
		assert.Equal(t, wantOK, ref.Reported, "%s: reported", f.File)
		assert.Equal(t, want, got, "%s: %s", f.File, f.Note)
	}
}

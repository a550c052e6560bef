package usage

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// walkedMessage is one message of a fixture as the test's own reader sees
// it.
type walkedMessage struct {
	headers map[string]string
	payload []byte
	end     int // offset just past the message
}

// walkEventStream reads an event stream with encoding/binary and
// hash/crc32 only (not the SDK), checking both CRCs, and returns its
// complete messages. It understands string headers (type 7), the only kind
// the fixtures use. rest is the number of bytes after the last complete
// message.
func walkEventStream(t *testing.T, b []byte) (msgs []walkedMessage, rest int) {
	t.Helper()
	off := 0
	for len(b)-off >= 12 {
		total := int(binary.BigEndian.Uint32(b[off:]))
		hlen := int(binary.BigEndian.Uint32(b[off+4:]))
		require.Equal(t, crc32.ChecksumIEEE(b[off:off+8]), binary.BigEndian.Uint32(b[off+8:]), "prelude CRC at %d", off)
		if len(b)-off < total {
			break
		}
		m := b[off : off+total]
		require.Equal(t, crc32.ChecksumIEEE(m[:total-4]), binary.BigEndian.Uint32(m[total-4:]), "message CRC at %d", off)
		hs := map[string]string{}
		h := m[12 : 12+hlen]
		for len(h) > 0 {
			n := int(h[0])
			name := string(h[1 : 1+n])
			require.Equal(t, byte(7), h[1+n], "header %s is a string", name)
			vlen := int(binary.BigEndian.Uint16(h[2+n:]))
			hs[name] = string(h[4+n : 4+n+vlen])
			h = h[4+n+vlen:]
		}
		msgs = append(msgs, walkedMessage{headers: hs, payload: m[12+hlen : total-4], end: off + total})
		off += total
	}
	return msgs, len(b) - off
}

// expectedDocs derives the documents a stream holds: each event's payload,
// an InvokeModel chunk's base64 "bytes" decoded (by encoding/json),
// nothing for exceptions and errors.
func expectedDocs(t *testing.T, msgs []walkedMessage) []string {
	t.Helper()
	var docs []string
	for _, m := range msgs {
		if m.headers[":message-type"] != "event" {
			continue
		}
		if m.headers[":event-type"] == "chunk" {
			var c struct {
				Bytes []byte `json:"bytes"`
			}
			require.NoError(t, json.Unmarshal(m.payload, &c))
			docs = append(docs, string(c.Bytes))
			continue
		}
		docs = append(docs, string(m.payload))
	}
	return docs
}

func readEventStreamFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "usage", name))
	require.NoError(t, err)
	return b
}

// feedEventStream pushes pieces through a new feed and returns the
// documents it handed on (copied) and the feed, closed.
func feedEventStream(t *testing.T, pieces [][]byte) ([]string, *eventStreamFeed) {
	t.Helper()
	var docs []string
	f := newEventStreamFeed(func(p []byte) { docs = append(docs, string(p)) })
	for _, p := range pieces {
		before := bytes.Clone(p)
		f.write(p)
		require.Equal(t, before, p, "write changed the caller's bytes")
	}
	_ = f.close()
	return docs, f
}

var converseEvents = []string{"messageStart", "contentBlockDelta", "contentBlockDelta", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"}

var eventStreamFixtures = []struct {
	file      string
	exception string
	pending   bool
	events    []string // :event-type, or :exception-type, of each whole message
}{
	{"bedrock-converse-stream.eventstream", "", false, converseEvents},
	{"bedrock-invoke-anthropic-stream.eventstream", "", false, []string{"chunk", "chunk", "chunk", "chunk", "chunk", "chunk", "chunk"}},
	{"bedrock-invoke-llama-stream.eventstream", "", false, []string{"chunk", "chunk", "chunk"}},
	{"bedrock-converse-stream-exception.eventstream", "modelStreamErrorException", false, []string{"messageStart", "contentBlockDelta", "contentBlockDelta", "modelStreamErrorException"}},
	{"bedrock-converse-stream-truncated.eventstream", "", true, converseEvents[:6]},
}

func TestEventStreamFeedFixturesAnySplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, fx := range eventStreamFixtures {
		body := readEventStreamFixture(t, fx.file)
		msgs, rest := walkEventStream(t, body)
		require.NotEmpty(t, msgs, fx.file)
		assert.Equal(t, fx.pending, rest > 0, "%s: bytes after the last whole message", fx.file)
		want := expectedDocs(t, msgs)
		largest := 0
		for i, m := range msgs {
			start := 0
			if i > 0 {
				start = msgs[i-1].end
			}
			largest = max(largest, m.end-start)
		}
		if rest >= 4 { // the cut message, as its prelude announces it
			largest = max(largest, int(binary.BigEndian.Uint32(body[len(body)-rest:])))
		}

		// One-byte writes (a cut inside every prelude and CRC), random
		// small writes, the whole body, and for the ConverseStream body
		// every two-piece cut.
		cuts := [][][]byte{{body}, splits(rng, body, 1), splits(rng, body, 13), splits(rng, body, 200)}
		for at := 1; at < len(body) && fx.file == "bedrock-converse-stream.eventstream"; at++ {
			cuts = append(cuts, [][]byte{body[:at], body[at:]})
		}
		for i, pieces := range cuts {
			docs, f := feedEventStream(t, pieces)
			require.NoError(t, f.failure(), "%s split %d", fx.file, i)
			require.Equal(t, want, docs, "%s split %d", fx.file, i)
			assert.Equal(t, fx.pending, f.pending(), "%s split %d: pending", fx.file, i)
			assert.Equal(t, fx.exception, f.exceptionType(), "%s split %d", fx.file, i)
			assert.Equal(t, len(msgs), f.messages, "%s split %d", fx.file, i)
			assert.LessOrEqual(t, cap(f.buf), largest, "%s split %d: holds at most one message", fx.file, i)
		}
	}
}

// TestEventStreamFixtureContents pins what the fixtures hold, read
// independently of the feed: Bedrock's event names and headers, and the
// usage the manifest states for each.
func TestEventStreamFixtureContents(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "usage", "manifest-eventstream.json"))
	require.NoError(t, err)
	var manifest struct {
		Fixtures []struct {
			File        string `json:"file"`
			ContentType string `json:"content_type"`
			In          *int64 `json:"expected_input_tokens"`
			Out         *int64 `json:"expected_output_tokens"`
			Total       *int64 `json:"expected_total"`
		} `json:"fixtures"`
	}
	require.NoError(t, json.Unmarshal(raw, &manifest))
	require.Len(t, manifest.Fixtures, len(eventStreamFixtures))

	for i, e := range manifest.Fixtures {
		require.Equal(t, eventStreamFixtures[i].file, e.File)
		assert.Equal(t, "application/vnd.amazon.eventstream", e.ContentType, e.File)
		msgs, _ := walkEventStream(t, readEventStreamFixture(t, e.File))
		var names []string
		for _, m := range msgs {
			assert.Equal(t, "application/json", m.headers[":content-type"], e.File)
			names = append(names, m.headers[":event-type"]+m.headers[":exception-type"])
		}
		assert.Equal(t, eventStreamFixtures[i].events, names, e.File)
		// The usage the manifest states, read with encoding/json from
		// the documents: Converse metadata.usage (inputTokens +
		// cacheReadInputTokens + cacheWriteInputTokens, outputTokens),
		// and for InvokeModel the Anthropic reports, which the final
		// invocationMetrics repeat.
		var in, out *int64
		set := func(i, o int64) { in, out = &i, &o }
		var anthropicIn, anthropicOut int64
		anthropic := false
		for _, d := range expectedDocs(t, msgs) {
			var doc struct {
				Type  string `json:"type"`
				Usage *struct {
					InputTokens     int64 `json:"inputTokens"`
					CacheRead       int64 `json:"cacheReadInputTokens"`
					CacheWrite      int64 `json:"cacheWriteInputTokens"`
					OutputTokens    int64 `json:"outputTokens"`
					AnthropicOutput int64 `json:"output_tokens"`
				} `json:"usage"`
				Metrics *struct {
					In  int64 `json:"inputTokenCount"`
					Out int64 `json:"outputTokenCount"`
				} `json:"amazon-bedrock-invocationMetrics"`
			}
			require.NoError(t, json.Unmarshal([]byte(d), &doc), "%s: %s", e.File, d)
			switch {
			case doc.Type == "message_start":
				var ms struct {
					Message struct {
						Usage struct {
							In     int64 `json:"input_tokens"`
							CacheW int64 `json:"cache_creation_input_tokens"`
							CacheR int64 `json:"cache_read_input_tokens"`
							Out    int64 `json:"output_tokens"`
						} `json:"usage"`
					} `json:"message"`
				}
				require.NoError(t, json.Unmarshal([]byte(d), &ms))
				u := ms.Message.Usage
				anthropicIn, anthropicOut, anthropic = u.In+u.CacheW+u.CacheR, u.Out, true
			case doc.Type == "message_delta" && doc.Usage != nil:
				anthropicOut = doc.Usage.AnthropicOutput
			case doc.Metrics != nil:
				if anthropic { // a Claude stream: the metrics restate its own report
					assert.Equal(t, anthropicIn, doc.Metrics.In, "%s: invocationMetrics repeat the input", e.File)
					assert.Equal(t, anthropicOut, doc.Metrics.Out, "%s: invocationMetrics repeat the output", e.File)
				}
				set(doc.Metrics.In, doc.Metrics.Out)
			case doc.Usage != nil && doc.Type == "":
				u := doc.Usage
				set(u.InputTokens+u.CacheRead+u.CacheWrite, u.OutputTokens)
			}
		}
		if in == nil {
			assert.Nil(t, e.In, e.File)
			assert.Nil(t, e.Out, e.File)
			assert.Nil(t, e.Total, e.File)
			t.Logf("%s: %v, no usage", e.File, names)
			continue
		}
		require.NotNil(t, e.In, e.File)
		assert.Equal(t, *in, *e.In, "%s input", e.File)
		assert.Equal(t, *out, *e.Out, "%s output", e.File)
		assert.Equal(t, *in+*out, *e.Total, "%s total", e.File)
		t.Logf("%s: %v, usage %d / %d", e.File, names, *in, *out)
	}
}

func TestEventStreamFeedExceptionIsNeverADocument(t *testing.T) {
	body := readEventStreamFixture(t, "bedrock-converse-stream-exception.eventstream")
	docs, f := feedEventStream(t, [][]byte{body})
	assert.Equal(t, "modelStreamErrorException", f.exceptionType())
	for _, d := range docs {
		assert.NotContains(t, d, "999999", "the exception's payload is not handed on")
	}
	assert.Len(t, docs, 3)

	// An :message-type error message (error code in :error-code).
	msg := esMessage(t, map[string]string{":message-type": "error", ":error-code": "InternalFailure", ":error-message": "boom"}, `{"usage":{"inputTokens":5}}`)
	docs, f = feedEventStream(t, [][]byte{msg})
	assert.Empty(t, docs)
	assert.Equal(t, "InternalFailure", f.exceptionType())
	assert.NoError(t, f.failure())
}

// esMessage frames one message by hand (encoding/binary, hash/crc32).
func esMessage(t *testing.T, headers map[string]string, payload string) []byte {
	t.Helper()
	var h []byte
	for _, name := range []string{":event-type", ":exception-type", ":error-code", ":error-message", ":content-type", ":message-type"} {
		v, ok := headers[name]
		if !ok {
			continue
		}
		h = append(h, byte(len(name)))
		h = append(h, name...)
		h = append(h, 7)
		h = binary.BigEndian.AppendUint16(h, uint16(len(v)))
		h = append(h, v...)
	}
	total := 16 + len(h) + len(payload)
	m := binary.BigEndian.AppendUint32(nil, uint32(total))
	m = binary.BigEndian.AppendUint32(m, uint32(len(h)))
	m = binary.BigEndian.AppendUint32(m, crc32.ChecksumIEEE(m))
	m = append(m, h...)
	m = append(m, payload...)
	return binary.BigEndian.AppendUint32(m, crc32.ChecksumIEEE(m))
}

func TestEventStreamFeedCorrupt(t *testing.T) {
	body := readEventStreamFixture(t, "bedrock-converse-stream.eventstream")
	msgs, _ := walkEventStream(t, body)
	want := expectedDocs(t, msgs)
	first := msgs[0].end
	second := msgs[1].end

	cases := []struct {
		name   string
		at     int // byte to flip
		reason DecodeReason
	}{
		{"prelude length", first + 2, DecodeCorrupt},
		{"prelude CRC", first + 9, DecodeCorrupt},
		{"header byte", first + 14, DecodeCorrupt},
		{"payload byte", second - 10, DecodeCorrupt},
		{"message CRC", second - 1, DecodeCorrupt},
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, tc := range cases {
		bad := bytes.Clone(body)
		bad[tc.at] ^= 0x40
		for _, pieces := range [][][]byte{{bad}, splits(rng, bad, 1), splits(rng, bad, 17)} {
			docs, f := feedEventStream(t, pieces)
			var de *DecodeError
			require.ErrorAs(t, f.failure(), &de, tc.name)
			assert.Equal(t, tc.reason, de.Reason, "%s: %v", tc.name, de)
			assert.Equal(t, want[:1], docs, "%s: the message before the corrupt one stands, nothing after it is read", tc.name)
			assert.False(t, f.pending(), tc.name)
		}
	}

	// Lengths that cannot be: shorter than a message, headers longer than
	// the message.
	for _, pre := range [][2]uint32{{8, 0}, {20, 10}} {
		b := binary.BigEndian.AppendUint32(nil, pre[0])
		b = binary.BigEndian.AppendUint32(b, pre[1])
		b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
		b = append(b, make([]byte, 16)...)
		_, f := feedEventStream(t, [][]byte{b})
		var de *DecodeError
		require.ErrorAs(t, f.failure(), &de, "prelude %v", pre)
		assert.Equal(t, DecodeCorrupt, de.Reason)
	}
}

func TestEventStreamFeedRefusesMessagesOverOneMiB(t *testing.T) {
	// A valid prelude announcing 1 MiB + 1: refused before any buffer is
	// sized to it.
	b := binary.BigEndian.AppendUint32(nil, maxEventMessage+1)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	for _, pieces := range [][][]byte{{b}, splits(rand.New(rand.NewPCG(1, 1)), b, 1)} {
		_, f := feedEventStream(t, pieces)
		var de *DecodeError
		require.ErrorAs(t, f.failure(), &de)
		assert.Equal(t, DecodeMessageTooLarge, de.Reason)
		assert.Less(t, cap(f.buf), 1024)
	}

	// Exactly 1 MiB is accepted.
	payload := `{"usage":{"inputTokens":1,"outputTokens":2},"p":"` + string(bytes.Repeat([]byte("a"), 1)) + `"}`
	hdr := map[string]string{":event-type": "metadata", ":content-type": "application/json", ":message-type": "event"}
	base := len(esMessage(t, hdr, payload))
	payload = payload[:len(payload)-2] + string(bytes.Repeat([]byte("a"), maxEventMessage-base)) + `"}`
	msg := esMessage(t, hdr, payload)
	require.Len(t, msg, maxEventMessage)
	docs, f := feedEventStream(t, splits(rand.New(rand.NewPCG(2, 2)), msg, 64<<10))
	require.NoError(t, f.failure())
	require.Equal(t, []string{payload}, docs)
}

func TestEventStreamFeedResetKeepsBuffers(t *testing.T) {
	var docs []string
	sink := func(p []byte) { docs = append(docs, string(p)) }
	f := newEventStreamFeed(sink)
	body := readEventStreamFixture(t, "bedrock-converse-stream-truncated.eventstream")
	f.write(body)
	require.True(t, f.pending())
	held := cap(f.buf)
	f.reset(sink)
	assert.False(t, f.pending(), "reset drops the partial message")
	assert.Equal(t, held, cap(f.buf))
	docs = nil
	full := readEventStreamFixture(t, "bedrock-converse-stream.eventstream")
	f.write(full)
	require.NoError(t, f.close())
	msgs, _ := walkEventStream(t, full)
	assert.Equal(t, expectedDocs(t, msgs), docs)
}

// FuzzEventStreamFeed feeds arbitrary bytes split at random: never a
// panic, the input never changed, at most one message held, and a failure
// is a *DecodeError.
func FuzzEventStreamFeed(f *testing.F) {
	for _, fx := range eventStreamFixtures {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "usage", fx.file))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint64(len(b)))
	}
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		orig := bytes.Clone(data)
		fd := newEventStreamFeed(func(p []byte) {
			if len(p) == 0 {
				t.Fatal("empty document")
			}
		})
		rng := rand.New(rand.NewPCG(seed, 1))
		for _, p := range splits(rng, data, 1+int(seed%64)) {
			fd.write(p)
		}
		if err := fd.close(); err != nil {
			if _, ok := err.(*DecodeError); !ok {
				t.Fatalf("error %T is not a *DecodeError", err)
			}
		}
		if !bytes.Equal(orig, data) {
			t.Fatal("the input bytes were modified")
		}
		if cap(fd.buf) > maxEventMessage {
			t.Fatalf("holds %d bytes", cap(fd.buf))
		}
	})
}

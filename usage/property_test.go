package usage_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// genEvent is one generated event: where it ends in the body (the byte
// after which it is complete) and the bytes of text it carries.
type genEvent struct {
	end  int
	text int64
}

// randText returns random text: ASCII, JSON's special characters, control
// bytes, 2-, 3- and 4-byte runes.
func randText(r *rand.Rand) string {
	pool := []rune{'a', 'b', ' ', 'Z', '"', '\\', '/', '\n', '\t', 0x01, 0x1f, 'é', 'ß', '€', '中', '😀', '🦀', 0x7f, 0x10FFFF}
	var b strings.Builder
	for range r.IntN(24) {
		b.WriteRune(pool[r.IntN(len(pool))])
	}
	return b.String()
}

// quote writes s as a JSON string, choosing at random between the literal
// form and escapes (\uXXXX, surrogate pairs) wherever JSON allows both.
func quote(r *rand.Rand, s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b.WriteString(`\` + string(c))
		case c == '\n' && r.IntN(2) == 0:
			b.WriteString(`\n`)
		case c < 0x20 || r.IntN(4) == 0:
			if c > 0xFFFF {
				c -= 0x10000
				fmt.Fprintf(&b, `\u%04X\u%04x`, 0xD800+(c>>10), 0xDC00+(c&0x3FF))
			} else {
				fmt.Fprintf(&b, `\u%04x`, c)
			}
		case c == '/' && r.IntN(2) == 0:
			b.WriteString(`\/`)
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// shapes are providers' text events, as JSON tokens around the text; the
// text goes where "%s" is.
var shapes = [][]string{
	{`{`, `"id":"c1"`, `,`, `"choices":[`, `{"index":0,"delta":{"role":"assistant","content":`, `%s`, `}`, `,"finish_reason":null}`, `]`, `,"usage":null`, `}`},
	{`{"type":"content_block_delta",`, `"index":0,`, `"delta":{"type":"text_delta",`, `"text":`, `%s`, `}}`},
	{`{"type":"response.output_text.delta",`, `"delta":`, `%s`, `,"sequence_number":4}`},
	{`{"candidates":[`, `{"content":{"parts":[{"text":`, `%s`, `}],"role":"model"}}`, `]}`},
	{`{"model":"m",`, `"message":{"role":"assistant","content":`, `%s`, `},`, `"done":false}`},
}

// genSSE returns a random event stream of n text events and, per event,
// where it completes and its text's bytes.
func genSSE(r *rand.Rand, n int) ([]byte, []genEvent) {
	var b []byte
	var evs []genEvent
	prevCR := false
	eol := func(empty bool) {
		e := []string{"\n", "\r\n", "\r"}[r.IntN(3)]
		if empty && prevCR && e == "\n" {
			e = "\r" // "\r" then "\n" would be one line break, not an empty line
		}
		b = append(b, e...)
		prevCR = e == "\r"
	}
	for range n {
		if r.IntN(4) == 0 {
			b = append(b, ": keep-alive"...)
			eol(false)
		}
		if r.IntN(2) == 0 {
			b = append(b, "event: delta"...)
			eol(false)
		}
		text := randText(r)
		b = append(b, "data:"...)
		if r.IntN(2) == 0 {
			b = append(b, ' ')
		}
		for _, tok := range shapes[r.IntN(len(shapes))] {
			if tok == "%s" {
				tok = quote(r, text)
			}
			b = append(b, tok...)
			switch r.IntN(6) {
			case 0:
				b = append(b, ' ')
			case 1: // JSON whitespace between tokens, as a new data line
				eol(false)
				b = append(b, "data: "...)
			}
		}
		eol(false)
		b = append(b, "id: 42"[:r.IntN(2)*6]...)
		if len(b) > 0 && b[len(b)-1] == '2' {
			eol(false)
		}
		end := len(b) + 1 // the empty line's first break dispatches
		eol(true)
		evs = append(evs, genEvent{end: end, text: int64(len(text))})
	}
	return b, evs
}

// genNDJSON returns random NDJSON lines of text events.
func genNDJSON(r *rand.Rand, n int) ([]byte, []genEvent) {
	var b []byte
	var evs []genEvent
	for range n {
		text := randText(r)
		for _, tok := range shapes[r.IntN(len(shapes))] {
			if tok == "%s" {
				tok = quote(r, text)
			}
			b = append(b, tok...)
			if r.IntN(5) == 0 {
				b = append(b, ' ')
			}
		}
		b = append(b, '\n')
		// A final line is complete without its newline once it closed.
		evs = append(evs, genEvent{end: len(b) - 1, text: int64(len(text))})
	}
	return b, evs
}

// TestChargeRandomStreams: streams of random text in random framing,
// written in random splits and cut at random points, report exactly the
// text the generator put in their complete events, and charge the estimate
// plus that text ÷ 4; a cut never charges more than the whole stream.
func TestChargeRandomStreams(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	for i := range 400 {
		ct, gen := "text/event-stream", genSSE
		if i%4 == 3 {
			ct, gen = "application/x-ndjson", genNDJSON
		}
		body, evs := gen(r, 1+r.IntN(12))
		require.True(t, utf8.Valid(body))
		var all int64
		for _, e := range evs {
			all += e.text
		}
		whole := scan(ct, "", body, 1+r.IntN(64))
		require.Equal(t, all, whole.GeneratedBytes, "%q", body)
		require.False(t, whole.Reported)
		require.Equal(t, 1000+all/4, whole.Charge(1000, false))

		k := r.IntN(len(body) + 1)
		var done int64
		for _, e := range evs {
			if e.end <= k {
				done += e.text
			}
		}
		cut := scan(ct, "", body[:k], 1+r.IntN(64))
		require.Equal(t, done, cut.GeneratedBytes, "cut at %d of %q", k, body)
		require.Equal(t, 1000+done/4, cut.Charge(1000, true))
		require.LessOrEqual(t, cut.Charge(1000, true), whole.Charge(1000, false))
	}
}

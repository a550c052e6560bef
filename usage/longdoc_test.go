package usage_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/llmrate/llmrate/internal/usageref"
	"github.com/llmrate/llmrate/usage"
)

// The fuzz targets write a body whole, in writes of one fixed size under
// 256 bytes, or a byte at a time (4 KiB bodies at most): none of them puts
// a string run longer than jsonrun's first long step (256 bytes) in one
// write and then ends a later write inside a name, an escape, a number or
// a literal. These tests generate such documents (long strings with
// escapes, controls and multi-byte UTF-8 at random places, the provider
// member names, nested containers, numbers of every shape) and write them
// in writes of random sizes, from one byte to several KiB, comparing with
// the encoding/json reference.

// longDocGen builds random JSON-ish documents.
type longDocGen struct {
	r   *rand.Rand
	b   strings.Builder
	bad int // 0 or 2, 3: how many invalid shapes number and value may pick
}

var longDocNames = []string{
	"usage", "prompt_tokens", "completion_tokens", "total_tokens", "input_tokens", "output_tokens",
	"cache_read_input_tokens", "cache_creation_input_tokens", "prompt_tokens_details", "cached_tokens",
	"completion_tokens_details", "reasoning_tokens", "usageMetadata", "promptTokenCount",
	"candidatesTokenCount", "thoughtsTokenCount", "cachedContentTokenCount", "message", "choices",
	"delta", "content", "text", "reasoning", "reasoning_content", "refusal", "arguments", "partial_json",
	"thinking", "response", "type", "done", "eval_count", "prompt_eval_count", "x", "usag", "usagex",
	"cont\\u0065nt", "us\\u0061ge", "content\\n", "",
}

func (g *longDocGen) str(long bool) {
	g.b.WriteByte('"')
	n := g.r.IntN(12)
	if long {
		n = 200 + g.r.IntN(6000)
	}
	for i := 0; i < n; i++ {
		switch k := g.r.IntN(400); {
		case k == 0:
			g.b.WriteString(`\"`)
		case k == 1:
			g.b.WriteString(`\\`)
		case k == 2:
			g.b.WriteString(`\n`)
		case k == 3:
			g.b.WriteString(`\u00e9`)
		case k == 4:
			g.b.WriteString(`\ud83d\ude00`)
		case k == 5:
			g.b.WriteString("é")
		case k == 6:
			g.b.WriteString("😀")
		case k == 7 && g.bad > 0:
			g.b.WriteByte(byte(g.r.IntN(0x20))) // a raw control: invalid
		case k == 8:
			g.b.WriteString(`{\"usage\":{\"prompt_tokens\":7},\"content\":\"x\"}`) // structure-looking text inside a string
		case k == 9:
			g.b.WriteString(`\/`)
		default:
			g.b.WriteByte(byte('a' + g.r.IntN(26)))
		}
	}
	g.b.WriteByte('"')
}

func (g *longDocGen) number() {
	g.b.WriteString([]string{"0", "1", "-1", "7", "123456", "9223372036854775807", "9223372036854775808",
		"1e3", "1.5", "-0", "1e700", "12.0", "2E+2", "3e-1", "18446744073709551616", "01", "1.", "-"}[g.r.IntN(15+g.bad)])
}

func (g *longDocGen) value(depth int) {
	switch k := g.r.IntN(10); {
	case k < 3:
		g.str(g.r.IntN(3) == 0)
	case k < 5:
		g.number()
	case k == 5:
		g.b.WriteString([]string{"true", "false", "null", "nul", "tru"}[g.r.IntN(3+min(g.bad, 2))])
	case k < 8 && depth < 6:
		g.object(depth + 1)
	case depth < 6:
		g.b.WriteByte('[')
		for i := range g.r.IntN(4) {
			if i > 0 {
				g.b.WriteByte(',')
			}
			g.ws()
			g.value(depth + 1)
		}
		g.b.WriteByte(']')
	default:
		g.number()
	}
}

func (g *longDocGen) ws() {
	if g.r.IntN(4) == 0 {
		g.b.WriteString([]string{" ", "\n", "\t ", "\r\n  "}[g.r.IntN(4)])
	}
}

func (g *longDocGen) object(depth int) {
	g.b.WriteByte('{')
	for i := range g.r.IntN(6) {
		if i > 0 {
			g.b.WriteByte(',')
		}
		g.ws()
		g.b.WriteString(`"` + longDocNames[g.r.IntN(len(longDocNames))] + `"`)
		g.ws()
		g.b.WriteByte(':')
		g.ws()
		g.value(depth)
		g.ws()
	}
	g.b.WriteByte('}')
}

// template writes a provider-shaped document: text members with long
// strings, a usage object of token counts, random members in between.
func (g *longDocGen) template() {
	extra := func() {
		if g.r.IntN(2) == 0 {
			g.b.WriteString(`"` + longDocNames[g.r.IntN(len(longDocNames))] + `":`)
			g.value(3)
			g.b.WriteByte(',')
		}
	}
	g.b.WriteByte('{')
	extra()
	switch g.r.IntN(3) {
	case 0:
		g.b.WriteString(`"choices":[{"delta":{"content":`)
		g.str(true)
		g.b.WriteString(`}},{"message":{"reasoning":`)
		g.str(g.r.IntN(2) == 0)
		g.b.WriteString(`}}],`)
	case 1:
		g.b.WriteString(`"content":[{"type":"text","text":`)
		g.str(true)
		g.b.WriteString(`}],`)
	default:
		g.b.WriteString(`"response":`)
		g.str(true)
		g.b.WriteByte(',')
	}
	extra()
	usageNames := [][]string{
		{"usage", "prompt_tokens", "completion_tokens", "total_tokens"},
		{"usage", "input_tokens", "output_tokens", "cache_read_input_tokens"},
		{"usageMetadata", "promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount"},
	}[g.r.IntN(3)]
	g.b.WriteString(`"` + usageNames[0] + `":{`)
	for i, n := range usageNames[1:] {
		if i > 0 {
			g.b.WriteByte(',')
		}
		g.ws()
		g.b.WriteString(`"` + n + `":`)
		g.ws()
		if g.r.IntN(4) == 0 {
			g.number()
		} else {
			fmt.Fprintf(&g.b, "%d", g.r.Int64N(1_000_000))
		}
	}
	g.b.WriteString(`}`)
	if g.r.IntN(2) == 0 {
		g.b.WriteByte(',')
		g.b.WriteString(`"text":`)
		g.str(true)
	}
	g.b.WriteByte('}')
}

func (g *longDocGen) doc() []byte {
	g.b.Reset()
	g.bad = 0
	if g.r.IntN(5) == 0 {
		g.bad = 3
	}
	if g.r.IntN(2) == 0 {
		g.template()
	} else {
		g.object(0)
	}
	b := []byte(g.b.String())
	switch g.r.IntN(10) {
	case 0: // truncated
		b = b[:g.r.IntN(len(b)+1)]
	case 1: // one byte replaced
		if len(b) > 0 {
			b[g.r.IntN(len(b))] = `{}[],:"\ 0a-e.`[g.r.IntN(14)]
		}
	case 2: // trailing data
		b = append(b, []string{" ", "{}", "x", "\n{\"usage\":{\"prompt_tokens\":1}}"}[g.r.IntN(4)]...)
	}
	return b
}

// scanSplit writes body in writes of random sizes (1 byte to several KiB).
func scanSplit(r *rand.Rand, ct string, body []byte) (usage.Result, []int) {
	s := usage.NewScanner(ct, "")
	var sizes []int
	for len(body) > 0 {
		var n int
		switch r.IntN(4) {
		case 0:
			n = 1 + r.IntN(3)
		case 1:
			n = 1 + r.IntN(64)
		case 2:
			n = 200 + r.IntN(600)
		default:
			n = 1 + r.IntN(8192)
		}
		n = min(n, len(body))
		_, _ = s.Write(body[:n])
		sizes = append(sizes, n)
		body = body[n:]
	}
	return s.Finish(), sizes
}

func TestLongStringsRandomWrites(t *testing.T) {
	docs := 1500
	if v, _ := strconv.Atoi(os.Getenv("LONGDOC_DOCS")); v > 0 {
		docs = v
	}
	if testing.Short() || raceDetector {
		docs = 200
	}
	for _, ct := range []string{"application/json", "text/event-stream", "application/x-ndjson"} {
		t.Run(strings.ReplaceAll(ct, "/", "_"), func(t *testing.T) {
			seed, _ := strconv.ParseUint(os.Getenv("LONGDOC_SEED"), 10, 64)
			r := rand.New(rand.NewPCG(3+seed, uint64(len(ct))))
			g := &longDocGen{r: r}
			fails, valid, reported, gen := 0, 0, 0, 0
			for i := 0; i < docs && fails < 3; i++ {
				var body []byte
				switch ct {
				case "application/json":
					body = g.doc()
				case "text/event-stream":
					for range 1 + r.IntN(3) {
						body = append(body, "data: "...)
						body = append(body, g.doc()...)
						body = append(body, []string{"\n\n", "\r\n\r\n", "\r\r"}[r.IntN(3)]...)
					}
				default:
					for range 1 + r.IntN(3) {
						body = append(body, g.doc()...)
						body = append(body, '\n')
					}
				}
				want := usageref.Body(ct, body)
				if json.Valid(body) {
					valid++
				}
				if want.Reported {
					reported++
				}
				if want.Gen > 0 {
					gen++
				}
				for try := range 4 {
					got, sizes := scanSplit(r, ct, body)
					if what := agrees(got, want, body); what != "" {
						fails++
						t.Errorf("doc %d try %d, writes %v: %s: scanner %+v != reference %+v for %s", i, try, sizes, what, got, want, quoteLong(body))
						break
					}
				}
			}
			t.Logf("%d documents: %d valid JSON as a whole, %d with usage reported, %d with generated text", docs, valid, reported, gen)
			if reported == 0 || gen == 0 {
				t.Errorf("the generator made no document with usage or text: the test proves nothing")
			}
		})
	}
}

func quoteLong(b []byte) string {
	if len(b) > 600 {
		return fmt.Sprintf("%q ... (%d bytes) ... %q", b[:300], len(b), b[len(b)-300:])
	}
	return fmt.Sprintf("%q", b)
}

// TestEveryBoundaryOfLongDocuments: documents whose strings run
// past jsonrun's long steps (256, 512, ... 4096 bytes), with an escape, a
// multi-byte character or a structure-looking text placed just before and
// after each step's end, written in two writes split at every byte, and in
// three writes split at every byte around each step's end.
func TestEveryBoundaryOfLongDocuments(t *testing.T) {
	run := func(n int, at int, ins string) string {
		var b strings.Builder
		for i := 0; b.Len() < n; i++ {
			if b.Len() >= at && b.Len() < at+len(ins)+1 && ins != "" {
				b.WriteString(ins)
				ins = ""
				continue
			}
			b.WriteByte(byte('a' + i%26))
		}
		return b.String()
	}
	var docs []string
	for _, at := range []int{60, 255, 256, 270, 511, 767, 1790, 3839, 4094, 7935, 8191} {
		for _, ins := range []string{`\"`, `\u00e9`, `\ud83d\ude00`, "é", `{\"usage\":{\"prompt_tokens\":9}}`, `\\`} {
			docs = append(docs, `{"choices":[{"delta":{"content":"`+run(at+300, at, ins)+`"}}],"usage":{"prompt_tokens":12,"completion_tokens":34}}`)
		}
	}
	// A long member name that is not one (and a long text after it).
	docs = append(docs, `{"`+run(5000, 4000, `\"`)+`":"x","text":"`+run(5000, 4095, `\n`)+`","usage":{"input_tokens":5,"output_tokens":6}}`)
	checked := 0
	for d, doc := range docs {
		body := []byte(doc)
		want := usageref.Body("application/json", body)
		if !want.Reported || want.Gen == 0 {
			t.Fatalf("doc %d: the reference finds no usage or text: %+v", d, want)
		}
		write := func(cuts ...int) {
			s := usage.NewScanner("application/json", "")
			prev := 0
			for _, c := range cuts {
				_, _ = s.Write(body[prev:c])
				prev = c
			}
			_, _ = s.Write(body[prev:])
			if what := agrees(s.Finish(), want, body); what != "" {
				t.Fatalf("doc %d split at %v: %s", d, cuts, what)
			}
			checked++
		}
		// Under the race detector (ten times slower) every third cut, and
		// the two-cut pass for one document in six.
		every := 1
		if raceDetector {
			every = 3
		}
		for c := 1; c < len(body); c += every {
			write(c)
		}
		if testing.Short() || raceDetector && d%6 != 0 {
			continue
		}
		for _, step := range []int{256, 512, 1024, 2048, 4096, 8192} {
			for c := max(1, step-40); c < min(len(body)-1, step+80); c++ {
				for c2 := c + 1; c2 < min(len(body), c+300); c2 += 13 {
					write(c, c2)
				}
			}
		}
	}
	t.Logf("%d documents, %d ways of writing them", len(docs), checked)
}

package llmrate_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/llmrate/llmrate"
)

func scanAll(ct string, body []byte, split int) (llmrate.Usage, bool) {
	s := llmrate.NewUsageScanner(ct, "")
	for len(body) > 0 {
		n := min(len(body), max(split, 1))
		_, _ = s.Write(body[:n])
		body = body[n:]
	}
	return s.Finish()
}

func addFixtureSeeds(f *testing.F, ct string) {
	for _, fx := range loadFixtures(f) {
		if fx.ContentType != ct || fx.ContentEncoding != "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(fixtureDir, fx.File))
		if err != nil {
			f.Fatal(err)
		}
		if len(b) <= 4<<10 { // larger ones make minimizing new inputs crawl
			f.Add(b, uint8(7))
		}
	}
}

func checkAgainstRef(t *testing.T, ct string, body []byte, split uint8, ref func([]byte) (llmrate.Usage, bool)) {
	t.Helper()
	if len(body) > 16<<10 {
		return // keeps the fuzzer fast; the fixture tests cover large bodies
	}
	wantU, wantOK := ref(body)
	sizes := []int{len(body), int(split)}
	if len(body) <= 4<<10 {
		sizes = append(sizes, 1) // one byte at a time: small inputs only
	}
	for _, n := range sizes {
		gotU, gotOK := scanAll(ct, body, n)
		if gotOK != wantOK || gotU != wantU {
			t.Fatalf("split %d: scanner (%v, %+v) != encoding/json reference (%v, %+v) for %q", n, gotOK, gotU, wantOK, wantU, body)
		}
	}
}

// FuzzUsageJSON: the JSON scanner never panics and reports exactly what a
// full encoding/json parse finds at the documented places, whatever the
// write boundaries.
func FuzzUsageJSON(f *testing.F) {
	addFixtureSeeds(f, "application/json")
	for _, s := range []string{
		`{"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
		`{"us\u0061ge":{"prompt_tokens":1}}`,
		`{"usage":{"prompt_tokens":1},"usage":null}`,
		`{"usage":{"prompt_tokens":-1,"completion_tokens":2}}`,
		`{"usage":{"prompt_tokens":9223372036854775808}}`,
		`{"usage":{"prompt_tokens":01}}`,
		`[{"usageMetadata":{"promptTokenCount":3}},{"usageMetadata":{"candidatesTokenCount":4}}]`,
		`{"type":"message_start","message":{"usage":{"input_tokens":5}}}`,
		`{"message":{"usage":{"input_tokens":5}},"type":"message_start"}`,
		`{"choices":[{"message":{"content":"{\"usage\":{\"prompt_tokens\":9}}"}}]}`,
		`{"done":true,"prompt_eval_count":1,"eval_count":2}`,
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, body []byte, split uint8) {
		checkAgainstRef(t, "application/json", body, split, refJSONBody)
	})
}

// FuzzUsageSSE: the same for event streams, including framing.
func FuzzUsageSSE(f *testing.F) {
	addFixtureSeeds(f, "text/event-stream")
	for _, s := range []string{
		"data: {\"usage\":{\"prompt_tokens\":1}}\n\n",
		"data:{\"usage\":{\"prompt_tokens\":1}}\r\n\r\n",
		"data: {\"usage\":\ndata: {\"prompt_tokens\":1}}\n\n",
		": comment\ndata: {\"usage\":{\"prompt_tokens\":1}}\r\r",
		"data: {\"usage\":{\"prompt_tokens\":1}}",
		"\xEF\xBB\xBFdata: {\"usage\":{\"prompt_tokens\":2}}\n\n",
		"event: x\ndata\ndata: {}\n\n",
	} {
		f.Add([]byte(s), uint8(2))
	}
	f.Fuzz(func(t *testing.T, body []byte, split uint8) {
		checkAgainstRef(t, "text/event-stream", body, split, refSSEBody)
	})
}

// FuzzUsageNDJSON: the same for Ollama's NDJSON.
func FuzzUsageNDJSON(f *testing.F) {
	addFixtureSeeds(f, "application/x-ndjson")
	f.Add([]byte("{\"done\":false}\n{\"done\":true,\"eval_count\":3}\n"), uint8(4))
	f.Fuzz(func(t *testing.T, body []byte, split uint8) {
		checkAgainstRef(t, "application/x-ndjson", body, split, refNDJSONBody)
	})
}

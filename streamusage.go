package llmrate

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// WithStreamUsage makes OpenAI-style streaming chat completions report
// usage: for a POST to a path ending in /chat/completions or /completions
// whose JSON body sets "stream": true without
// "stream_options": {"include_usage": true}, the body forwarded upstream
// gets include_usage set (Content-Length fixed up), so the stream ends with a
// usage chunk the limiter reconciles with. That usage-only chunk is then
// dropped from what the client receives, so a client that did not ask for it
// never sees it. A client that asked for usage gets it untouched. Bodies over
// DefaultMaxInjectBody bytes (1 MiB, the most held per request), or not JSON
// objects, are forwarded untouched. Default: off (request bodies are never
// read).
func WithStreamUsage() Option {
	return optionFunc(func(c *config) { c.streamUse = true })
}

// injectStreamUsage rewrites r's body if it qualifies and reports whether it
// did. On any doubt it leaves the body exactly as it was.
func injectStreamUsage(r *http.Request, maxBody int64) bool {
	if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody {
		return false
	}
	if p := r.URL.Path; !strings.HasSuffix(p, "/chat/completions") && !strings.HasSuffix(p, "/completions") {
		return false
	}
	if r.ContentLength > maxBody {
		return false
	}
	orig := r.Body
	buf, err := io.ReadAll(io.LimitReader(orig, maxBody+1))
	restore := func() {
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), orig), orig}
	}
	if err != nil || int64(len(buf)) > maxBody {
		restore()
		return false
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(buf, &doc) != nil || string(bytes.TrimSpace(doc["stream"])) != "true" {
		restore()
		return false
	}
	opts := map[string]json.RawMessage{}
	if raw := bytes.TrimSpace(doc["stream_options"]); len(raw) > 0 && string(raw) != "null" {
		if json.Unmarshal(raw, &opts) != nil {
			restore()
			return false
		}
		if string(bytes.TrimSpace(opts["include_usage"])) == "true" {
			restore() // the client asked for usage itself
			return false
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	o, err1 := json.Marshal(opts)
	doc["stream_options"] = o
	out, err2 := json.Marshal(doc)
	if err1 != nil || err2 != nil {
		restore()
		return false
	}
	_ = orig.Close()
	r.Body = io.NopCloser(bytes.NewReader(out))
	r.ContentLength = int64(len(out))
	r.Header.Set("Content-Length", strconv.Itoa(len(out)))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(out)), nil }
	return true
}

// maxHeldEvent bounds the bytes held back while an injected stream's event
// is incomplete; a longer event is passed through as it comes.
const maxHeldEvent = 64 << 10

// usageFilter passes an injected SSE stream to the client event by event,
// dropping the usage-only chunk ("choices": [] with a usage object) that the
// injection caused. Complete events go out in the same Write that completes
// them; only an incomplete event's bytes are held, up to maxHeldEvent.
type usageFilter struct {
	held    []byte
	passing bool // an oversized event is being passed through to its end
}

// write forwards what can be forwarded from b through out.
func (f *usageFilter) write(b []byte, out func([]byte) (int, error)) error {
	for len(b) > 0 {
		if f.passing {
			end := fastEventEnd(b)
			if end < 0 {
				_, err := out(b)
				return err
			}
			f.passing = false
			if _, err := out(b[:end]); err != nil {
				return err
			}
			b = b[end:]
			continue
		}
		if len(f.held) == 0 {
			// Fast path: whole events straight from b, no copy.
			end := fastEventEnd(b)
			if end < 0 {
				break
			}
			if !usageOnlyEvent(b[:end]) {
				if _, err := out(b[:end]); err != nil {
					return err
				}
			}
			b = b[end:]
			continue
		}
		break
	}
	if len(b) == 0 {
		return nil
	}
	f.held = append(f.held, b...)
	for {
		end := fastEventEnd(f.held)
		if end < 0 {
			break
		}
		if !usageOnlyEvent(f.held[:end]) {
			if _, err := out(f.held[:end]); err != nil {
				return err
			}
		}
		f.held = append(f.held[:0], f.held[end:]...)
	}
	if len(f.held) > maxHeldEvent {
		f.passing = true
		_, err := out(f.held)
		f.held = f.held[:0]
		return err
	}
	return nil
}

// flush forwards whatever is still held (a stream that ended mid-event).
func (f *usageFilter) flush(out func([]byte) (int, error)) {
	if len(f.held) > 0 {
		_, _ = out(f.held)
		f.held = f.held[:0]
	}
	f.passing = false
}

// eventEnd returns the length of the first complete event in b, through the
// empty line that ends it, or -1. b starts at the start of a line.
func eventEnd(b []byte) int {
	lineStart := true
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\n' && c != '\r' {
			lineStart = false
			continue
		}
		end := i + 1
		if c == '\r' {
			if end == len(b) {
				return -1 // the next byte may be the LF of a CRLF
			}
			if b[end] == '\n' {
				end++
			}
		}
		if lineStart {
			return end
		}
		lineStart = true
		i = end - 1
	}
	return -1
}

// usageOnlyEvent reports whether an event is the usage-only chunk of an
// OpenAI stream with include_usage.
func usageOnlyEvent(ev []byte) bool {
	if !bytes.Contains(ev, []byte(`"usage"`)) {
		return false
	}
	var data []byte
	for _, line := range bytes.Split(bytes.ReplaceAll(ev, []byte("\r\n"), []byte("\n")), []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(v, []byte(" "))...)
		}
	}
	var chunk struct {
		Choices *[]json.RawMessage `json:"choices"`
		Usage   json.RawMessage    `json:"usage"`
	}
	if json.Unmarshal(data, &chunk) != nil || chunk.Choices == nil || len(*chunk.Choices) != 0 {
		return false
	}
	u := bytes.TrimSpace(chunk.Usage)
	return len(u) > 0 && u[0] == '{'
}

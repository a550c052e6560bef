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
// never sees it; such a response goes out without the upstream's
// Content-Length, which would no longer hold. A client that asked for usage
// gets it untouched. Bodies over
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

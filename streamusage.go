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
//
// The chunk can be dropped only from a body sent as it is (identity): an
// encoded stream is relayed byte for byte. So a request that gets
// include_usage also gets "Accept-Encoding: identity" in place of the
// client's (any HTTP client accepts identity): that stream reaches the
// client uncompressed, and usage counts as for any stream. A client that
// refuses identity ("identity;q=0", or "*;q=0" without identity) keeps its
// Accept-Encoding and its body is forwarded untouched: such a stream
// reports usage only if the client asked for it. An upstream that encodes
// the stream despite "identity" has its usage read all the same, but its
// usage chunk reaches the client: each such response is counted
// (StreamUsageShown) and logged at warn.
//
// What a rewrite costs: the body is read whole, decoded into a map and
// encoded again, about 5 bytes allocated per byte of body (5 MiB for a
// 1 MiB body), and the rewritten body (as large as the original) is held
// until the request ends, for the body and GetBody. Filtering the stream
// costs linear time in its bytes and holds at most one incomplete event
// (64 KiB) per stream.
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
	if r.ContentLength > maxBody || !identityAccepted(r.Header.Values("Accept-Encoding")) {
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
	// The usage chunk can be dropped only from an identity body.
	r.Header.Set("Accept-Encoding", "identity")
	return true
}

// identityAccepted reports whether a request's Accept-Encoding values
// accept the identity coding (RFC 9110 §12.5.3): unless "identity" is
// listed with q=0, or "*" is with q=0 and identity is not listed, it is.
func identityAccepted(values []string) bool {
	star := true
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(item, ";")
			name = strings.TrimSpace(name)
			switch {
			case strings.EqualFold(name, "identity"):
				return !zeroQ(params)
			case name == "*":
				star = !zeroQ(params)
			}
		}
	}
	return star
}

// zeroQ reports whether an Accept-Encoding item's parameters set q to 0
// ("q=0", "q=0.0", "q=0.000").
func zeroQ(params string) bool {
	for _, p := range strings.Split(params, ";") {
		k, v, ok := strings.Cut(p, "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		v = strings.TrimSpace(v)
		if v == "" || v[0] != '0' {
			return false
		}
		return strings.Trim(v[1:], ".0") == ""
	}
	return false
}

// StreamUsageShown returns how many streams that WithStreamUsage asked for
// usage came back encoded despite "Accept-Encoding: identity", so that
// their usage chunk reached a client that did not ask for it (0 without
// WithStreamUsage).
func (l *Limiter) StreamUsageShown() int64 { return l.usageShown.Load() }

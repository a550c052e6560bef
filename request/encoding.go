package request

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/llmrate/llmrate/internal/readahead"
	"github.com/llmrate/llmrate/usage"
)

// A request body sent with a Content-Encoding (gzip, x-gzip, deflate, br,
// zstd) is read by Model, Estimate and Input as its decoded bytes, through
// the decoders the response side uses (package usage, with their memory
// bounds): at most MaxBody decoded bytes are read ahead, so a decompression
// bomb is stopped there, and at most MaxBody encoded bytes are held for the
// next handler, which still reads every original byte. A body decoding to
// more than MaxBody bytes is read as a chunked body that large is (no
// model; the estimate is the Content-Length's). A coding that cannot be
// decoded (another coding, a chain such as "gzip, br", a corrupt or
// truncated stream, encoded bytes past MaxBody before the decoded ones
// reach it, a brotli window over 4 MiB) takes the fallback of a body that
// is not JSON: Model reads the path, Estimate and Input estimate from the
// Content-Length.

// requestCoding returns r's Content-Encoding values as one list, or ""
// when they name no coding but identity.
func requestCoding(r *http.Request) string {
	vs := r.Header.Values("Content-Encoding")
	for _, v := range vs {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" && !strings.EqualFold(tok, "identity") {
				return strings.Join(vs, ",")
			}
		}
	}
	return ""
}

// errHeldFull stops a decoder that would need more than MaxBody
// encoded bytes held.
var errHeldFull = errors.New("llmrate: more than MaxModelBody encoded bytes read ahead")

// rawTap reads a request body for a decoder, holding the bytes read (for
// the replay), at most limit of them.
type rawTap struct {
	r     io.Reader
	held  []byte
	limit int
	err   error // the body's own read error; io.EOF at its end
}

func (t *rawTap) Read(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	room := t.limit - len(t.held)
	if room <= 0 {
		return 0, errHeldFull
	}
	if len(p) > room {
		p = p[:room]
	}
	n, err := t.r.Read(p)
	if len(t.held)+n > cap(t.held) {
		grown := make([]byte, len(t.held), min(max(2*cap(t.held), len(t.held)+n, 4<<10), t.limit))
		copy(grown, t.held)
		t.held = grown
	}
	t.held = append(t.held, p[:n]...)
	if err != nil {
		t.err = err
	}
	return n, err
}

// maxRequestBrotliWindowBits bounds the window a brotli request body may
// ask its decoder for: 2^22 bytes (4 MiB, the window of brotli's default
// quality 11 encoders). A larger one (up to 2^24) is not decoded.
const maxRequestBrotliWindowBits = 22

// errBrotliWindow stops a brotli request body whose window is larger.
var errBrotliWindow = errors.New("llmrate: brotli request body with a window over 4 MiB not decoded")

// brotliWindowBits returns the window size (WBITS) a brotli stream's
// first byte names (RFC 7932 §9.1); 0 for the reserved large-window mark.
func brotliWindowBits(b byte) int {
	if b&1 == 0 {
		return 16
	}
	if n := b >> 1 & 7; n != 0 {
		return 17 + int(n)
	}
	switch m := b >> 4 & 7; m {
	case 0:
		return 17
	case 1:
		return 0 // reserved (large-window brotli): the decoder rejects it
	default:
		return 8 + int(m)
	}
}

// readAheadEncoded is readAheadBody for a body with a Content-Encoding. nil:
// the coding is not one that is decoded; the body is left as it is.
func readAheadEncoded(r *http.Request, coding string) *replayBody {
	tap := &rawTap{r: r.Body, limit: MaxBody}
	var src io.Reader = tap
	var dec io.Reader
	var done func()
	var err error
	if strings.EqualFold(strings.TrimSpace(coding), "br") {
		// A brotli stream names its window in its first bits, and the
		// decoder allocates that window whole: a client could make a tiny
		// body cost 16 MiB. A window past maxRequestBrotliWindowBits takes
		// the fallback of a coding that cannot be decoded.
		var first [1]byte
		n, _ := io.ReadFull(tap, first[:])
		if n == 1 && brotliWindowBits(first[0]) > maxRequestBrotliWindowBits {
			err = errBrotliWindow
		}
		src = io.MultiReader(bytes.NewReader(first[:n]), tap)
	}
	if err == nil {
		dec, done, err = usage.Decode(coding, src)
	}
	var decoded []byte
	end := err
	if err == nil {
		decoded, end = readahead.Read(dec, make([]byte, 0, 4<<10), MaxBody)
		if end == nil { // MaxBody decoded bytes: one more tells a larger body
			var one [1]byte
			if n, perr := io.ReadFull(dec, one[:]); n == 0 {
				end = perr
			}
		}
		done()
	} else if len(tap.held) == 0 && tap.err == nil {
		return nil // an unsupported coding or a chain: nothing was read
	}
	rb := &replayBody{head: tap.held, ahead: decoded, end: end, Closer: r.Body}
	switch tap.err {
	case nil:
		rb.rest = r.Body
	case io.EOF:
	default:
		rb.rest = errReader{tap.err}
	}
	r.Body = rb
	return rb
}

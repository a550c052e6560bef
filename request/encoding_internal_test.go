package request

import (
	"bytes"
	"testing"

	"github.com/andybalholm/brotli"
)

// TestBrotliWindowBits: the window a brotli stream's first byte names, as
// the encoder was told to write it, for every window it can write.
func TestBrotliWindowBits(t *testing.T) {
	for lgwin := 10; lgwin <= 24; lgwin++ {
		var b bytes.Buffer
		w := brotli.NewWriterOptions(&b, brotli.WriterOptions{Quality: 5, LGWin: lgwin})
		if _, err := w.Write(bytes.Repeat([]byte(`{"model":"gpt-4o"}`), 100)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if got := brotliWindowBits(b.Bytes()[0]); got != lgwin {
			t.Errorf("lgwin %d: read %d from first byte %#08b", lgwin, got, b.Bytes()[0])
		}
	}
}

package readahead_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/llmrate/llmrate/internal/readahead"
)

// TestReadGrowsToWantAtMost: the buffer read ahead never grows past want,
// however it started, and holds exactly the bytes read.
func TestReadGrowsToWantAtMost(t *testing.T) {
	for _, tc := range []struct{ size, start, want int }{
		{1_000_000, 64 << 10, 1 << 20},
		{2 << 20, 64 << 10, 1 << 20},
		{1 << 20, 0, 1 << 20},
		{10, 0, 1 << 20},
		{100, 1, 7},
	} {
		src := strings.Repeat("a", tc.size)
		buf, err := readahead.Read(strings.NewReader(src), make([]byte, 0, tc.start), tc.want)
		if cap(buf) > max(tc.want, tc.start) {
			t.Errorf("%+v: cap %d, past want", tc, cap(buf))
		}
		n := min(tc.size, tc.want)
		if !bytes.Equal(buf, []byte(src[:n])) {
			t.Errorf("%+v: read %d bytes, want %d", tc, len(buf), n)
		}
		if (tc.size < tc.want) != (err == io.EOF) {
			t.Errorf("%+v: err %v", tc, err)
		}
	}
}

package usage

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// zstdStream is an SSE stream of n events as a streaming zstd encoder with
// the RFC 9659 window sends it: flushed after every event, so the frame
// declares its 8 MiB window rather than its content size.
func zstdStream(t testing.TB, n int) (plain, enc []byte) {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithWindowSize(maxZstdWindow), zstd.WithEncoderConcurrency(1))
	require.NoError(t, err)
	ev := []byte(`data: {"choices":[{"index":0,"delta":{"content":"hello"}}]}` + "\n\n")
	for range n {
		plain = append(plain, ev...)
		_, err = zw.Write(ev)
		require.NoError(t, err)
		require.NoError(t, zw.Flush())
	}
	require.NoError(t, zw.Close())
	return plain, buf.Bytes()
}

// TestZstdBodyCostsNoWindow: issue 22 item 4. A zstd body costs its
// decoding, not a fresh 8 MiB window: decoders (and their windows) are
// reused. sync.Pool keeps them per P (processor), so over many bodies at
// most one window per P is allocated (a P whose pool is empty makes one),
// and each body allocates only the feed's own buffers (under 64 KiB).
// Before the pool every body allocated its window: 8.8 MB per 1 KB body.
func TestZstdBodyCostsNoWindow(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race sync.Pool drops items at random; the guard runs without -race")
	}
	plain, enc := zstdStream(t, 16) // about 1 KB decoded
	require.Zero(t, enc[4]&(1<<5), "the frame is not single-segment: it declares a window")
	require.Equal(t, 23, 10+int(enc[5]>>3), "the frame declares an 8 MiB window")
	body := func() {
		got, err := decodeThrough(t, "zstd", [][]byte{enc[:len(enc)/2], enc[len(enc)/2:]})
		require.NoError(t, err)
		require.Equal(t, plain, got)
	}
	// No collection during the measure: sync.Pool drops what stays idle
	// through two of them (allocatedDuring runs one).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	const bodies = 200
	alloc := allocatedDuring(func() {
		for range bodies {
			body()
		}
	})
	procs := uint64(runtime.GOMAXPROCS(0))
	t.Logf("%d bytes allocated per 1 KB zstd body over %d bodies (%d Ps)", alloc/bodies, bodies, procs)
	assert.LessOrEqual(t, alloc, procs*zstdMemBound+bodies*(64<<10), "at most one window per P, then under 64 KiB per body")
}

// TestZstdDecoderReuseKeepsBodiesApart: a reused decoder decodes each body
// as a fresh one would: bodies of every shape in a row (windowed and
// single-segment frames, two frames in one body, a corrupt, a truncated
// and an oversized-window body between them) each give exactly their own
// bytes or their own error, and the 8 MiB window cap holds on reuse.
func TestZstdDecoderReuseKeepsBodiesApart(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // keep the pool across the bodies
	plainA, encA := zstdStream(t, 300)
	plainB := []byte(`{"usage":{"prompt_tokens":3,"completion_tokens":4}}`)
	zw, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	require.NoError(t, err)
	encB := zw.EncodeAll(plainB, nil)
	require.NoError(t, zw.Close())
	corrupt := bytes.Clone(encA)
	corrupt[len(corrupt)/2] ^= 0xff
	tooLarge := append(zstdFrameHeader(24), zstdRLEBlock('x', 1000, true)...)

	type body struct {
		name   string
		enc    []byte
		want   []byte // nil: an error with reason
		reason DecodeReason
	}
	bodies := []body{
		{"windowed", encA, plainA, 0},
		{"single segment", encB, plainB, 0},
		{"corrupt", corrupt, nil, DecodeCorrupt},
		{"windowed again", encA, plainA, 0},
		{"16 MiB window", tooLarge, nil, DecodeWindowTooLarge},
		{"truncated", encA[:len(encA)-7], nil, DecodeTruncated},
		{"two frames", append(bytes.Clone(encB), encA...), append(bytes.Clone(plainB), plainA...), 0},
		{"single segment again", encB, plainB, 0},
	}
	for round := range 3 {
		for _, b := range bodies {
			got, err := decodeThrough(t, "zstd", splits(rand.New(rand.NewPCG(uint64(round), 7)), b.enc, 700))
			if b.want != nil {
				require.NoError(t, err, "round %d, %s", round, b.name)
				require.Equal(t, b.want, got, "round %d, %s", round, b.name)
				continue
			}
			var de *DecodeError
			require.ErrorAs(t, err, &de, "round %d, %s", round, b.name)
			assert.Equal(t, b.reason, de.Reason, "round %d, %s: %v", round, b.name, err)
		}
	}
}

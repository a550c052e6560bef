package usage_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate/usage"
)

// The filter's work is bounded by a constant times the scanner's: every
// byte is looked at a bounded number of times, whatever the writes look
// like. Measured against the scanner alone on the same writes (the work
// the limiter does without WithStreamUsage), in the same test, as the
// fastest of a few runs each, so a loaded machine slows both alike. Before
// the filter was made linear the ratios were about 45 (one big write) and
// about 900 (tiny writes).
const filterCostRatio = 8

// filterCost returns the fastest of runs passes of writes through the
// scanner alone and through a Filter over a scanner.
func filterCost(writes [][]byte, runs int) (scan, filtered time.Duration) {
	scan, filtered = time.Hour, time.Hour
	for range runs {
		s := usage.NewScanner("text/event-stream", "")
		start := time.Now()
		for _, w := range writes {
			_, _ = s.Write(w)
		}
		s.Finish()
		scan = min(scan, time.Since(start))

		var f usage.Filter
		f.Reset(usage.NewScanner("text/event-stream", ""), io.Discard.Write)
		start = time.Now()
		for _, w := range writes {
			_, _ = f.Write(w)
		}
		_ = f.Flush()
		filtered = min(filtered, time.Since(start))
	}
	return scan, filtered
}

func checkFilterCost(t *testing.T, writes [][]byte) {
	t.Helper()
	scan, filtered := filterCost(writes, 5)
	// 2 ms of slack keeps a test on a tiny baseline from timer noise alone.
	if filtered > filterCostRatio*scan+2*time.Millisecond {
		t.Fatalf("the filter took %v where the scan alone took %v: ×%.0f, want at most ×%d",
			filtered, scan, float64(filtered)/float64(scan), filterCostRatio)
	}
	t.Logf("scan %v, filtered %v (×%.1f)", scan, filtered, float64(filtered)/float64(scan))
}

// TestUsageFilterLinearInOneWrite: 64,000 events arriving in one write
// while the filter holds the start of an event (the previous write ended
// mid-event) cost what the scan costs, within a small constant.
func TestUsageFilterLinearInOneWrite(t *testing.T) { checkFilterCost(t, oneBigWrite()) }

// oneBigWrite is 64,000 events in one write that follows a write ending
// mid-event.
func oneBigWrite() [][]byte {
	var b strings.Builder
	for i := range 64000 {
		fmt.Fprintf(&b, "data: {\"choices\":[{\"delta\":{\"content\":\"%d\"}}]}\n\n", i%10)
	}
	all := "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
	return [][]byte{[]byte(all[:10]), []byte(all[10:] + b.String())}
}

// TestUsageFilterLinearInTinyWrites: a stream of events of many short
// lines, in 8-byte writes, costs what the scan costs, within a small
// constant: the held event is never searched again from its start.
func TestUsageFilterLinearInTinyWrites(t *testing.T) { checkFilterCost(t, tinyWrites()) }

// tinyWrites is 256 KiB of events of many short lines in 8-byte writes.
func tinyWrites() [][]byte {
	var b strings.Builder
	for b.Len() < 256<<10 {
		b.WriteString("event: e\n")
		for range 4000 { // about 44 KiB of short lines: held whole, under the 64 KiB bound
			b.WriteString("data: {}\n")
		}
		b.WriteString("\n")
	}
	s := []byte(b.String())
	var writes [][]byte
	for len(s) > 0 {
		n := min(8, len(s))
		writes = append(writes, s[:n])
		s = s[n:]
	}
	return writes
}

// BenchmarkUsageFilter: the filter against the scan alone, on the two
// shapes above (for timing on a quiet machine).
func BenchmarkUsageFilter(b *testing.B) {
	for name, writes := range map[string][][]byte{"one-big-write": oneBigWrite(), "8-byte-writes": tinyWrites()} {
		n := 0
		for _, w := range writes {
			n += len(w)
		}
		b.Run(name+"/scan", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				s := usage.NewScanner("text/event-stream", "")
				for _, w := range writes {
					_, _ = s.Write(w)
				}
				s.Finish()
			}
		})
		b.Run(name+"/filter", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				var f usage.Filter
				f.Reset(usage.NewScanner("text/event-stream", ""), io.Discard.Write)
				for _, w := range writes {
					_, _ = f.Write(w)
				}
				_ = f.Flush()
			}
		})
	}
}

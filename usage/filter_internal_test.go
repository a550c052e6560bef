package usage

import (
	"io"
	"strings"
	"testing"
)

// TestFilterReleasesLargeBuffers: a Filter is pooled with its tracker, so
// a huge incomplete write it once held must not stay allocated in it.
func TestFilterReleasesLargeBuffers(t *testing.T) {
	var f Filter
	f.Reset(NewScanner("text/event-stream", ""), io.Discard.Write)
	if _, err := f.Write([]byte("data: " + strings.Repeat("x", 4<<20))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("\n\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Reset(nil, nil)
	if c := cap(f.held); c > 2*maxHeldEvent {
		t.Fatalf("after Reset the Filter still holds a %d-byte buffer; want at most %d", c, 2*maxHeldEvent)
	}
}

package llmrate

import (
	"net/http"
	"testing"
)

// TestHeaderGetCanonicalNames: headerGet skips canonicalization, so every
// name it is called with must already be canonical, and it must then agree
// with http.Header.Get.
func TestHeaderGetCanonicalNames(t *testing.T) {
	h := http.Header{}
	for _, name := range []string{"Authorization", "X-Api-Key", "Content-Type", "Content-Encoding", HeaderRequestID} {
		if c := http.CanonicalHeaderKey(name); c != name {
			t.Errorf("%q is not canonical (%q)", name, c)
		}
		if got := headerGet(h, name); got != "" {
			t.Errorf("absent %s: got %q", name, got)
		}
		h.Add(name, "first "+name)
		h.Add(name, "second")
		if got, want := headerGet(h, name), h.Get(name); got != want {
			t.Errorf("%s: headerGet %q, Header.Get %q", name, got, want)
		}
	}
	// Header(name) canonicalizes its name once, up front.
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("x-custom-key", "k1")
	if k, err := Header("x-CUSTOM-key")(r); err != nil || k != "k1" {
		t.Errorf("Header(x-CUSTOM-key) = %q, %v", k, err)
	}
}

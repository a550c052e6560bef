package llmrate

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestAfterCharge checks the post-charge level against hand-worked figures
// on a bucket of capacity 1,200 (the level a store ends at, never below 0).
func TestAfterCharge(t *testing.T) {
	for _, tc := range []struct {
		name               string
		level, est, charge int64
		want               int64
	}{
		{"charge equals estimate", 1100, 100, 100, 1100},
		{"under-estimate debited", 1100, 100, 550, 650},
		{"over-estimate credited", 1100, 100, 40, 1160},
		{"credit capped at capacity", 1150, 100, 0, 1200},
		{"debt shows as 0", 500, 100, 900, 0},
		{"huge charge: no overflow", 1100, 100, 1<<63 - 1, 0},
		{"already in debt", -300, 100, 100, 0},
	} {
		assert.Equal(t, tc.want, afterCharge(tc.level, tc.est, tc.charge, 1200), tc.name)
	}
}

// TestPlanTrailers: only requests whose response can carry trailers plan
// them.
func TestPlanTrailers(t *testing.T) {
	req := func(method string, major, minor int) *http.Request {
		r := httptest.NewRequest(method, "/", nil)
		r.ProtoMajor, r.ProtoMinor = major, minor
		return r
	}
	assert.Equal(t, trailersH1, planTrailers(true, req(http.MethodPost, 1, 1)))
	assert.Equal(t, trailersH2, planTrailers(true, req(http.MethodPost, 2, 0)))
	assert.Equal(t, trailersOff, planTrailers(true, req(http.MethodPost, 1, 0)), "HTTP/1.0 cannot chunk")
	assert.Equal(t, trailersOff, planTrailers(true, req(http.MethodHead, 2, 0)), "HEAD has no body")
	assert.Equal(t, trailersOff, planTrailers(false, req(http.MethodPost, 2, 0)), "option off")
}

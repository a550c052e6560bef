package clients_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/require"
)

// reconciles records the limiter's reconcile events. They are sent on the
// gateway's goroutine once the handler returned, which for a response with
// a Content-Length can be after the client read the last byte: tests wait
// for them.
type reconciles struct{ ch chan llmrate.ReconcileEvent }

func newReconciles() *reconciles { return &reconciles{ch: make(chan llmrate.ReconcileEvent, 16)} }

func (*reconciles) Decided(llmrate.DecisionEvent)         {}
func (*reconciles) FailedOpen(llmrate.FailOpenEvent)      {}
func (*reconciles) Evicted()                              {}
func (r *reconciles) Reconciled(e llmrate.ReconcileEvent) { r.ch <- e }

// next returns the next reconcile event, failing the test if none comes
// within a few seconds (a bound on a hang, not a wait for time to pass).
func (r *reconciles) next(t *testing.T) llmrate.ReconcileEvent {
	t.Helper()
	select {
	case e := <-r.ch:
		return e
	case <-time.After(5 * time.Second):
		require.FailNow(t, "no reconcile event")
		return llmrate.ReconcileEvent{}
	}
}

// fixedClock is the limiter's clock: one instant, so no bucket refills
// while a test runs.
func fixedClock() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }

// sigV4AccessKey is the gateway's key extractor for AWS clients: the
// access key id in a SigV4 Authorization header
// ("AWS4-HMAC-SHA256 Credential=AKID/20260102/us-east-1/bedrock/aws4_request, ...").
func sigV4AccessKey(r *http.Request) (string, error) {
	_, cred, ok := strings.Cut(r.Header.Get("Authorization"), "Credential=")
	if !ok {
		return "", errors.New("no SigV4 credential")
	}
	id, _, ok := strings.Cut(cred, "/")
	if !ok || id == "" {
		return "", errors.New("malformed SigV4 credential")
	}
	return id, nil
}

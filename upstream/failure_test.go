package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// closedURL is a loopback URL nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	return u
}

// A dial error happens before the provider saw the request: the key's
// reservation is credited back in full, requests and tokens, and the
// error is returned.
func TestDialErrorRefunds(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 1, 1000)}) // a burst of 2 requests
	url := closedURL(t)
	for range 5 {
		_, err := r.client().Post(url, "application/json", strings.NewReader(chat("m", 400)))
		require.Error(t, err)
		var op *net.OpError
		assert.True(t, errors.As(err, &op), "the dial error itself: %v", err)
	}
	lv := r.levels("a")
	assert.Equal(t, [4]int64{2, 2000, 2, 2000}, lv, "every failed attempt refunded")
	ev := r.rec.reconciled()
	require.Len(t, ev, 5)
	for _, e := range ev {
		assert.True(t, e.Refund)
		assert.Equal(t, int64(100), e.Estimate)
	}
	assert.Equal(t, []string{"a:failed", "a:failed", "a:failed", "a:failed", "a:failed"}, r.rec.outcomes())
	resp, _ := r.post(t, chat("m", 400))
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a still has its whole burst")
}

// A panic in Authorize is returned as an error and refunds; nothing is
// sent, and the caller's body is closed.
func TestAuthorizePanicRefunds(t *testing.T) {
	t.Parallel()
	boom := upstream.Key{Name: "boom", Limits: llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1000},
		Authorize: func(*http.Request) { panic("no credential") }}
	r := newRig(t, []upstream.Key{boom})
	for range 3 {
		body := &trackedBody{Reader: strings.NewReader(chat("m", 400))}
		req, err := http.NewRequest(http.MethodPost, r.p.srv.URL, body)
		require.NoError(t, err)
		req.ContentLength = 400
		resp, err := r.tr.RoundTrip(req)
		require.Error(t, err)
		assert.Nil(t, resp)
		var pe *llmrate.PanicError
		require.True(t, errors.As(err, &pe), "%v", err)
		assert.Equal(t, "no credential", pe.Value)
		assert.Equal(t, int32(1), body.closed.Load())
	}
	assert.Empty(t, r.p.calls())
	ws := "upstream:boom"
	assert.Equal(t, [4]int64{2, 2000, 2, 2000}, r.store.Levels(ws, ws, boom.Limits, boom.Limits, r.clk.Now()))
}

// An error after the request was sent (here the provider hangs up without
// answering) charges the estimate: the provider may have counted it.
func TestErrorAfterSendChargesEstimate(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 1000)})
	r.p.on("sk-a", func(w http.ResponseWriter, _ *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = c.Close()
		}
	})
	_, err := r.client().Post(r.p.srv.URL, "application/json", strings.NewReader(chat("m", 400)))
	require.Error(t, err)
	assert.Equal(t, [4]int64{199, 2000 - 100, 199, 2000 - 100}, r.levels("a"))
	ev := r.rec.reconciled()
	require.Len(t, ev, 1)
	assert.False(t, ev[0].Refund)
	assert.Equal(t, int64(100), ev[0].Actual)
}

// failingStore fails every call.
type failingStore struct{ calls atomic.Int32 }

func (s *failingStore) Admit(context.Context, llmrate.AdmitRequest) (llmrate.Decision, error) {
	s.calls.Add(1)
	return llmrate.Decision{}, errors.New("store down")
}

func (s *failingStore) Reconcile(context.Context, llmrate.ReconcileRequest) error {
	s.calls.Add(1)
	return errors.New("store down")
}

// panickingStore panics on every call.
type panickingStore struct{}

func (panickingStore) Admit(context.Context, llmrate.AdmitRequest) (llmrate.Decision, error) {
	panic("store bug")
}

func (panickingStore) Reconcile(context.Context, llmrate.ReconcileRequest) error {
	panic("store bug")
}

// A store fault fails open: the key is used, the fault counted and logged
// (by key name, never the secret).
func TestStoreFaultFailsOpen(t *testing.T) {
	t.Parallel()
	for _, s := range []llmrate.Store{&failingStore{}, panickingStore{}} {
		p := newProvider(t)
		core, logs := observer.New(zap.DebugLevel)
		rec := &recorder{}
		tr, err := upstream.New([]upstream.Key{bearerKey("primary", "sk-secret-a", 10, 1000)},
			upstream.WithStore(s), upstream.WithLogger(zap.New(core)), upstream.WithObserver(rec))
		require.NoError(t, err)
		resp, err := (&http.Client{Transport: tr}).Post(p.srv.URL, "application/json", strings.NewReader(chat("m", 400)))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, []string{"sk-secret-a"}, p.creds())
		assert.Equal(t, int64(1), tr.FailOpens(), "counted")
		require.Len(t, rec.attempts, 1)
		assert.True(t, rec.attempts[0].FailedOpen)
		var se *llmrate.StoreError
		assert.True(t, errors.As(rec.attempts[0].Err, &se), "%v", rec.attempts[0].Err)
		assert.Empty(t, rec.reconciles, "no reservation, nothing to reconcile")
		warns := logs.FilterLevelExact(zap.WarnLevel).All()
		require.Len(t, warns, 1, "logged at warn")
		assert.Equal(t, "primary", warns[0].ContextMap()["upstream_key"])
		for _, e := range logs.All() {
			assert.NotContains(t, fmt.Sprint(e.Message, e.ContextMap()), "sk-secret")
		}
	}
}

// blockingStore answers only when its context is done.
type blockingStore struct{}

func (blockingStore) Admit(ctx context.Context, _ llmrate.AdmitRequest) (llmrate.Decision, error) {
	<-ctx.Done()
	return llmrate.Decision{}, ctx.Err()
}

func (blockingStore) Reconcile(ctx context.Context, _ llmrate.ReconcileRequest) error {
	<-ctx.Done()
	return ctx.Err()
}

// A store call past WithStoreTimeout fails open, counted.
func TestStoreTimeoutFailsOpen(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	rec := &recorder{}
	tr, err := upstream.New([]upstream.Key{bearerKey("a", "sk-a", 10, 1000)},
		upstream.WithStore(blockingStore{}), upstream.WithStoreTimeout(time.Millisecond), upstream.WithObserver(rec))
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: tr}).Post(p.srv.URL, "application/json", strings.NewReader(chat("m", 400)))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(1), tr.FailOpens())
	require.Len(t, rec.attempts, 1)
	assert.True(t, rec.attempts[0].FailedOpen)
	assert.ErrorIs(t, rec.attempts[0].Err, context.DeadlineExceeded)
}

// A panicking estimator is a fault: the request goes out on the default
// estimate, counted.
func TestEstimatorPanicFailsOpen(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 10, 1000)}, upstream.WithEstimator(func(*http.Request) int64 { panic("bad estimator") }))
	resp, _ := r.post(t, chat("m", 400))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(1), r.tr.FailOpens())
	ev := r.rec.reconciled()
	require.Len(t, ev, 1)
	assert.Equal(t, int64(100), ev[0].Estimate, "Content-Length / 4")
}

package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// heldStore passes everything to a Redis store, but holds every Reconcile
// until release is closed.
type heldStore struct {
	*redisstore.Store
	entered atomic.Int64
	release chan struct{}
}

func (s *heldStore) Reconcile(ctx context.Context, r llmrate.ReconcileRequest) error {
	s.entered.Add(1)
	<-s.release
	return s.Store.Reconcile(ctx, r)
}

// TestResponseCompletesBeforeReconcile: a client of a Redis-backed gateway
// reads each whole chunked response, terminator included, while every
// reconcile is held in the store; after Close every charge is in Redis,
// with the same levels as a run of the same trace that reconciles
// synchronously.
func TestResponseCompletesBeforeReconcile(t *testing.T) {
	_, c := redisrig.Start(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	provider := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","choices":[],`)
		w.(http.Flusher).Flush() // chunked from here on
		_, _ = fmt.Fprintf(w, `"usage":{"prompt_tokens":%s,"completion_tokens":7}}`, r.Header.Get("X-Usage"))
	})
	type step struct {
		key   string
		est   int64 // Content-Length / 4
		usage int64
	}
	trace := []step{{"sk-a", 1000, 20}, {"sk-b", 10, 5000}, {"sk-a", 300, 300}, {"sk-c", 1, 90_000}, {"sk-b", 50_000, 1}, {"sk-a", 7, 123_456}}
	run := func(t *testing.T, s llmrate.Store, opts ...llmrate.Option) (*llmrate.Limiter, func(step) *http.Response) {
		l, err := llmrate.New(append([]llmrate.Option{llmrate.WithStore(s), llmrate.WithClock(clock), llmrate.WithStoreTimeout(10 * time.Second)}, opts...)...)
		require.NoError(t, err)
		ts := httptest.NewServer(l.Middleware(provider))
		t.Cleanup(ts.Close)
		hc := ts.Client()
		hc.Timeout = 5 * time.Second // a response held by its reconcile fails the test
		return l, func(st step) *http.Response {
			body := strings.Repeat("x", int(4*st.est))
			r, err := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
			require.NoError(t, err)
			r.Header.Set("Authorization", "Bearer "+st.key)
			r.Header.Set("X-Usage", strconv.FormatInt(st.usage, 10))
			resp, err := hc.Do(r)
			require.NoError(t, err)
			return resp
		}
	}

	held := &heldStore{Store: redisrig.Store(t, c, redisstore.WithClock(clock)), release: make(chan struct{})}
	released := false
	t.Cleanup(func() {
		if !released {
			close(held.release)
		}
	})
	l, send := run(t, held)
	for i, st := range trace {
		resp := send(st)
		b, err := io.ReadAll(resp.Body) // the terminator is read, or ReadAll fails
		require.NoError(t, err, "step %d", i)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, []string{"chunked"}, resp.TransferEncoding)
		assert.True(t, strings.HasSuffix(string(b), "}}"), "whole body: %s", b)
		require.Eventually(t, func() bool { return held.entered.Load() == int64(i+1) }, 5*time.Second, time.Millisecond,
			"the reconcile reached the store after the response completed")
	}
	close(held.release)
	released = true
	require.NoError(t, l.Close(context.Background()))
	assert.Zero(t, l.FailOpens())

	sync := redisrig.Store(t, c, redisstore.WithClock(clock))
	ls, sendSync := run(t, sync, llmrate.WithReconcileQueue(0))
	for _, st := range trace {
		resp := sendSync(st)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
	}
	require.NoError(t, ls.Close(context.Background()))

	free := llmrate.DefaultTiers().Free
	for _, key := range []string{"sk-a", "sk-b", "sk-c"} {
		probe := llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Solo: true, Now: now}
		want, err := sync.Admit(context.Background(), probe)
		require.NoError(t, err)
		got, err := held.Store.Admit(context.Background(), probe)
		require.NoError(t, err)
		assert.Equal(t, want, got, key)
	}
	// And by hand for sk-c: 400,000 - 1 (estimate) - (90,007 - 1) - 1 (probe).
	got, err := sync.Admit(context.Background(), llmrate.AdmitRequest{Key: "sk-c", Workspace: "sk-c", KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Solo: true, Now: now})
	require.NoError(t, err)
	assert.Equal(t, int64(400_000-90_007-2), got.Remaining[llmrate.WorkspaceTokens])
}

// TestHonoursContext: the store ends every call by its context's
// deadline whatever the client, so the limiter always calls it directly.
func TestHonoursContext(t *testing.T) {
	off := redisrig.NewClient(t, &redis.Options{Addr: "127.0.0.1:1"})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	for _, c := range []redis.UniversalClient{off, cluster} {
		s, err := redisstore.New(c, redisrig.HashKey)
		require.NoError(t, err)
		assert.True(t, s.HonoursContext())
	}
}

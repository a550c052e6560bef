package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func leaseReconcileStore(t *testing.T, opts ...Option) (*Store, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(c, append([]Option{WithHashKey([]byte("identity-record-secret")), WithBatching(1), WithTimeout(time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s, c
}

// TestLeaseReconcileRepeatReturnsLeases: a reconcile already applied
// under its ID, sent again later with leases this process has given up
// since (the limiter retries a reconcile whose reply it did not get),
// still returns those leases: their records go and their unused parts are
// credited, so that capacity is not held until the leases expire.
func TestLeaseReconcileRepeatReturnsLeases(t *testing.T) {
	s, c := leaseReconcileStore(t, WithLeases(0.1))
	ctx := context.Background()
	l := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000_000}
	k, w := s.names("k", "ws", "", false)
	rec := llmrate.ReconcileRequest{Key: "k", Workspace: "ws", KeyLimits: l, WorkspaceLimits: l, Estimate: 10, Actual: 20, ID: "rid-1"}
	keys := []string{k, w, k + ":l", w + ":l", idKey(w, 'r', rec.ID)}
	args := append(reconcileArgs(s.nowArg(), rec, false), "", 0, 0, 0, 0, "")
	n, err := leaseReconcileScript.Run(ctx, c, keys, args...).Int()
	require.NoError(t, err)
	require.Equal(t, 1, n, "applied")

	// A lease taken since (a renewal with an admission of its own).
	_, granted, err := s.runLease(ctx, leaseCall{k: k, w: w, tokens: 10, kl: l, wl: l,
		want: [4]int64{10, 10_000, 10, 10_000}, wnew: "p:1", knew: "p:2"})
	require.NoError(t, err)
	require.NotZero(t, granted[2])
	wl, err := c.HLen(ctx, w+":l").Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), wl)
	before, _, err := s.runLease(ctx, leaseCall{k: k, w: w, tokens: -1, kl: l, wl: l})
	require.NoError(t, err)

	// The repeat, returning that lease unused.
	args = append(reconcileArgs(s.nowArg(), rec, false), "p:1", granted[0], granted[1], granted[2], granted[3], "p:2")
	n, err = leaseReconcileScript.Run(ctx, c, keys, args...).Int()
	require.NoError(t, err)
	assert.Equal(t, 0, n, "not applied again")
	for _, h := range []string{w + ":l", k + ":l"} {
		m, err := c.HLen(ctx, h).Result()
		require.NoError(t, err)
		assert.Zero(t, m, "the lease returned (%s)", h)
	}
	after, _, err := s.runLease(ctx, leaseCall{k: k, w: w, tokens: -1, kl: l, wl: l})
	require.NoError(t, err)
	assert.Equal(t, before.Remaining[2]+granted[2], after.Remaining[2], "the unused part credited, the charge not applied again")
}

package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestChargeRefusedByBreakerNotFixed: a fresh charge sent while the
// breaker is open and its probe due: sendCharge takes the probe, the
// debit's own call is refused by the breaker, nothing is sent, and the
// charge is not reported debited (its content stays open to its
// reconcile).
func TestChargeRefusedByBreakerNotFixed(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(c, WithPrefix("crbnf"), WithHashKey([]byte("charge-refused-secret-0")), WithBatching(1), WithFallbackLocal(), WithRetryInterval(0))
	require.NoError(t, err)
	s.open.Store(true)
	s.probeAt.Store(0) // the breaker open, its probe due
	l := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 10_000}
	r := llmrate.AdmitRequest{Key: "k", Workspace: "k", KeyLimits: l, WorkspaceLimits: l, Tokens: 5, Solo: true, Now: time.Now(), ID: llmrate.NewAdmissionID()}
	debited, err := s.sendCharge(context.Background(), r, nil, true)
	t.Logf("debited %v, err %v, errors counted %d", debited, err, s.Errors())
	require.ErrorIs(t, err, errDown)
	require.False(t, debited, "nothing was sent: the charge is not fixed")
}

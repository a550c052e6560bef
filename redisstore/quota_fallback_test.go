package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFallbackKeepsASpentQuota: what Redis spent of a calendar month, a
// session and a lent plan quota is not given back by an outage: the local
// fallback decides from the levels Redis reported (MemoryStore.Follow),
// and Peek reads them there while Redis is down.
func TestFallbackKeepsASpentQuota(t *testing.T) {
	if _, ok := any(llmrate.NewMemoryStore()).(llmrate.Peeker); !ok {
		t.Skip("the memory store keeps no quotas yet (it is no Peeker): the fallback cannot follow them")
	}
	_, p, c := faultyRedis(t)
	s := redisrig.Store(t, c, redisstore.WithClock(frozen), redisstore.WithFallbackLocal(), redisstore.WithTimeout(200*time.Millisecond),
		redisstore.WithRetryInterval(time.Hour), redisstore.WithBatching(1))
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := context.Background()
	month := llmrate.Window{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Requests: 3}
	sess := llmrate.Window{Per: 5 * time.Hour, Session: true, Tokens: 100}
	plan := withWindows(roomy, month, sess)
	entry := roomy
	req := func(model string, tokens int64) llmrate.AdmitRequest {
		r := llmrate.AdmitRequest{Key: "sk-fb", Workspace: "acme", Model: model, KeyLimits: plan, WorkspaceLimits: roomy,
			Tokens: tokens, Now: frozen(), ID: llmrate.NewAdmissionID()}
		if model != "" {
			r.KeyLimits, r.KeyPlan, r.WorkspacePlan = entry, &plan, &roomy
		}
		return r
	}
	d, err := s.Admit(ctx, req("", 40))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = s.Admit(ctx, req("gpt-4o*", 40))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NotEqual(t, "local", d.Receipt, "Redis decided")

	p.setDown(true)
	pk, err := s.Peek(ctx, req("", 1))
	require.NoError(t, err)
	require.Len(t, pk.KeyWindows, 2)
	assert.Equal(t, int64(1), pk.KeyWindows[0].Requests, "the fallback's month: what Redis left")
	assert.Equal(t, int64(20), pk.KeyWindows[1].Tokens, "the fallback's session: what Redis left")
	d, err = s.Admit(ctx, req("claude-*", 30))
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the session's 20 tokens left hold in the fallback too")
	assert.True(t, d.Lent)
	d, err = s.Admit(ctx, req("", 20))
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, "local", d.Receipt)
	d, err = s.Admit(ctx, req("", 1))
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the month's 3 requests are spent, outage or not")
	assert.Equal(t, llmrate.CalendarMonth, d.Calendar)
}

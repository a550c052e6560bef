package llmrate

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Window sets are bounded by WithMaxKeys as entries are, and a window
// holding spend (in debt or not) is never forgotten to keep the bound: a
// key flood leaves a daily debt owed.
func TestWindowSetsBoundedAndDebtKept(t *testing.T) {
	t.Parallel()
	s := NewMemoryStore(WithMaxKeys(256)) // 2 per shard
	lim := Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000_000, Windows: []Window{{Per: 24 * time.Hour, Tokens: 100}}}
	now := time.Unix(1_700_000_000, 0)
	ctx := context.Background()
	admit := func(key string, tokens int64) Decision {
		d, err := s.Admit(ctx, AdmitRequest{Key: key, Workspace: key, KeyLimits: lim, WorkspaceLimits: lim, Tokens: tokens, Solo: true, Now: now})
		require.NoError(t, err)
		return d
	}
	require.True(t, admit("victim", 1).Allowed)
	require.NoError(t, s.Reconcile(ctx, ReconcileRequest{Key: "victim", Workspace: "victim", KeyLimits: lim, WorkspaceLimits: lim,
		Estimate: 1, Actual: 200, Solo: true, Now: now}))
	for i := range 20_000 {
		now = now.Add(time.Millisecond)
		require.True(t, admit("flood-"+strconv.Itoa(i), 1).Allowed)
	}
	sets := s.t.WinSets()
	assert.LessOrEqual(t, int64(sets), 256+s.OverBound(), "window sets held to the bound, beyond it only for what they hold")
	assert.Equal(t, 20_001, sets, "every set holds spend (1 of 100 tokens a day): none is evicted, as none may give a quota back")
	d := admit("victim", 1)
	assert.False(t, d.Allowed, "the victim's debt of 100 tokens on its daily window is still owed")
	assert.Equal(t, []WindowLevels{{Tokens: -100}}, d.KeyWindows)
}

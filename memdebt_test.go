package llmrate_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// debtAfterFigureCut builds the debt of issue 18 item 9 in s: a Solo key
// admitted 1 token under Scale and reconciled at 160,000,000 (level
// 80,000,000 - 160,000,000 + 1 - 1 = -80,000,000), then moved to Free at the
// same instant, where its admission is refused. It returns that instant.
func debtAfterFigureCut(t *testing.T, s *llmrate.MemoryStore, key string) time.Time {
	t.Helper()
	ctx := context.Background()
	tiers := llmrate.DefaultTiers()
	scale, free := tiers.Scale, tiers.Free
	now := time.Unix(1_700_000_000, 0)
	d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: scale, WorkspaceLimits: scale, Tokens: 1, Solo: true, Now: now})
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: key, Workspace: key, KeyLimits: scale, WorkspaceLimits: scale, Estimate: 1, Actual: 160_000_000, Solo: true, Now: now}))
	d, err = s.Admit(ctx, llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Solo: true, Now: now})
	require.NoError(t, err)
	require.False(t, d.Allowed, "the key owes 80,000,000 tokens")
	return now
}

// exactDebtLevel is the whole-unit level of the -80,000,000 debt after idle
// at Free's 200,000 tokens a minute: floor(-80,000,000 + 200,000×idle/1 min).
func exactDebtLevel(idle time.Duration) int64 {
	num := -80_000_000*int64(time.Minute) + 200_000*int64(idle)
	q := num / int64(time.Minute)
	if num%int64(time.Minute) != 0 && num < 0 {
		q--
	}
	return q
}

// TestMemoryStoreKeepsDebtAfterFigureCut: issue 18 item 9. A debt built
// under Scale and then held to Free's figures (by a refused admission) is
// owed for 402 minutes at Free's refill, not the 6 minutes a debt under
// Scale would take: neither the idle sweep nor an eviction at the
// WithMaxKeys bound may drop it after 6 min 1 s, and the store reports the
// exact level (-78,796,667), not a full bucket.
func TestMemoryStoreKeepsDebtAfterFigureCut(t *testing.T) {
	t.Parallel()
	idle := 6*time.Minute + time.Second
	require.Equal(t, int64(-78_796_667), exactDebtLevel(idle)) // the figure, worked by hand
	free := llmrate.DefaultTiers().Free
	for _, c := range []struct {
		name string
		opts []llmrate.MemoryOption
	}{
		{"idle sweep", nil},
		{"eviction at the bound", []llmrate.MemoryOption{llmrate.WithMaxKeys(128)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := llmrate.NewMemoryStore(c.opts...)
			now := debtAfterFigureCut(t, s, "sk-debt")
			later := now.Add(idle)
			for i := range 20_000 { // enough new keys to sweep every shard, or to evict at the bound many times
				k := "sk-new-" + strconv.Itoa(i)
				_, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: k, Workspace: k, KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Solo: true, Now: later})
				require.NoError(t, err)
			}
			lv := s.Levels("sk-debt", "sk-debt", free, free, later)
			assert.Equal(t, exactDebtLevel(idle), lv[llmrate.KeyTokens], "the debt is still owed")
			assert.Equal(t, exactDebtLevel(idle), lv[llmrate.WorkspaceTokens])
		})
	}
}

// TestMemoryStoreDropsDebtOnceRefilled: the debt of
// TestMemoryStoreKeepsDebtAfterFigureCut is kept past the WithMaxKeys bound
// until time alone has refilled it under Free's figures (402 minutes:
// 80,400,000 tokens at 200,000 a minute), and dropped without loss then,
// so the store comes back to its bound.
func TestMemoryStoreDropsDebtOnceRefilled(t *testing.T) {
	t.Parallel()
	free := llmrate.DefaultTiers().Free
	s := llmrate.NewMemoryStore(llmrate.WithMaxKeys(128)) // one entry per shard
	now := debtAfterFigureCut(t, s, "sk-debt")
	flood := func(prefix string, at time.Time) {
		for i := range 5_000 { // every shard gets new keys (a shard missed: p < 1e-15)
			k := prefix + strconv.Itoa(i)
			_, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: k, Workspace: k, KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Solo: true, Now: at})
			require.NoError(t, err)
		}
	}
	early := now.Add(402*time.Minute - time.Second)
	flood("sk-b-", early)
	lv := s.Levels("sk-debt", "sk-debt", free, free, early)
	assert.Equal(t, int64(400_000-3_334), lv[llmrate.KeyTokens], "one second short of full: 200,000/60 = 3,333.3 tokens owed")
	_, ws := s.Len()
	assert.Equal(t, 129, ws, "one entry per shard, and the debt beyond the bound")
	assert.Equal(t, int64(1), s.OverBound(), "the debt's shard went past its bound once; later keys there evict the other entry")

	full := now.Add(402 * time.Minute)
	flood("sk-c-", full)
	_, ws = s.Len()
	assert.Equal(t, 128, ws, "the refilled debt was dropped: back to the bound")
	assert.Equal(t, int64(1), s.OverBound())
	assert.Equal(t, [4]int64{200, 400_000, 200, 400_000}, s.Levels("sk-debt", "sk-debt", free, free, full), "full once refilled")
}

// TestMemoryStoreExceedsBoundRatherThanForgetDebt: at the WithMaxKeys bound
// with every entry in debt, a new key's entry is added beyond the bound
// (counted by OverBound) rather than drop a debt; every debt is still owed
// exactly. Once the debts have refilled, new keys evict them without loss and
// the store is back within its bound.
func TestMemoryStoreExceedsBoundRatherThanForgetDebt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	free := llmrate.DefaultTiers().Free
	s := llmrate.NewMemoryStore(llmrate.WithMaxKeys(128)) // one entry per shard
	now := time.Unix(1_700_000_000, 0)
	const debtors = 600
	for i := range debtors {
		k := "sk-debt-" + strconv.Itoa(i)
		_, err := s.Admit(ctx, llmrate.AdmitRequest{Key: k, Workspace: k, KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Solo: true, Now: now})
		require.NoError(t, err)
		// 400,000 - 1 - (800,000 - 1) = -400,000 tokens: 4 minutes owed.
		require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: k, Workspace: k, KeyLimits: free, WorkspaceLimits: free, Estimate: 1, Actual: 800_000, Solo: true, Now: now}))
	}
	_, ws := s.Len()
	assert.Equal(t, debtors, ws, "no debt dropped: the store exceeds its bound of 128")
	assert.Positive(t, s.OverBound(), "each entry past the bound is counted")
	assert.Zero(t, s.Evictions(), "nothing lost")
	later := now.Add(3 * time.Minute)
	for i := range debtors {
		k := "sk-debt-" + strconv.Itoa(i)
		lv := s.Levels(k, k, free, free, later)
		require.Equal(t, int64(-400_000+3*200_000), lv[llmrate.KeyTokens], "debtor %d still owes its debt less 3 minutes of refill", i)
	}
	over := s.OverBound()

	// Refilled (6 minutes): new keys replace the debts without loss, one
	// entry per shard again.
	full := now.Add(6 * time.Minute)
	for i := range 5_000 { // every shard gets new keys (a shard missed: p < 1e-15)
		k := "sk-new-" + strconv.Itoa(i)
		_, err := s.Admit(ctx, llmrate.AdmitRequest{Key: k, Workspace: k, KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Solo: true, Now: full})
		require.NoError(t, err)
	}
	assert.Equal(t, over, s.OverBound(), "no entry added past the bound once the debts could be dropped")
	_, ws = s.Len()
	assert.Equal(t, 128, ws, "the refilled debts were dropped: back to the bound")
}

package llmrate_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestKeyFloodBounded: a million distinct keys through a store bounded at
// 20,000 entries keep memory bounded, while an active key in the middle of
// the flood is enforced exactly.
func TestKeyFloodBounded(t *testing.T) {
	const bound, flood = 20_000, 1_000_000
	s := llmrate.NewMemoryStore(llmrate.WithMaxKeys(bound))
	free := llmrate.DefaultTiers().Free
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	before := heapInUse()
	admitted := 0
	for i := range flood {
		k := "sk-flood-" + strconv.Itoa(i)
		_, _ = s.Admit(ctx, llmrate.AdmitRequest{Key: k, Workspace: k, KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Now: now})
		if i%2000 == 0 { // an active key, spending once per 2,000 flood keys
			d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: "sk-active", Workspace: "sk-active", KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Now: now})
			require.NoError(t, err)
			if d.Allowed {
				admitted++
			}
		}
	}
	keys, workspaces := s.Len()
	assert.LessOrEqual(t, keys, bound, "key entries bounded")
	assert.LessOrEqual(t, workspaces, bound, "workspace entries bounded")
	grown := int64(heapInUse()) - int64(before)
	t.Logf("heap grew %d KB for %d live entries after %d keys; %d lossy evictions", grown/1024, keys+workspaces, flood, s.Evictions())
	assert.Less(t, grown, int64(16<<20), "heap stays bounded by MaxKeys (stated bound: 16 MB for 20,000+20,000 entries)")
	assert.Equal(t, 200, admitted, "the active key is enforced exactly: its burst of 200 (500 attempts, no refill on a frozen clock)")
	assert.Positive(t, s.Evictions(), "at the bound, flood entries were dropped")
}

// TestLosslessEviction: entries that time alone has refilled are dropped
// without changing any decision; an entry in debt is kept until it would be
// full.
func TestLosslessEviction(t *testing.T) {
	s := llmrate.NewMemoryStore()
	free := llmrate.DefaultTiers().Free
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	admit := func(k string, n int64, at time.Time) llmrate.Decision {
		d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: k, Workspace: k, KeyLimits: free, WorkspaceLimits: free, Tokens: n, Now: at})
		require.NoError(t, err)
		return d
	}
	for i := range 50_000 {
		admit("sk-old-"+strconv.Itoa(i), 1, now)
	}
	// one key deep in debt
	admit("sk-debt", 1, now)
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: "sk-debt", Workspace: "sk-debt", KeyLimits: free, WorkspaceLimits: free, Estimate: 1, Actual: 800_000, Now: now}))
	later := now.Add(3 * time.Minute) // every old entry is full again; the debt is not (6 min)
	for i := range 50_000 {
		admit("sk-new-"+strconv.Itoa(i), 1, later)
	}
	keys, _ := s.Len()
	assert.Less(t, keys, 70_000, "old, refilled entries were swept")
	assert.Zero(t, s.Evictions(), "no lossy eviction below the bound")
	lv := s.Levels("sk-debt", "sk-debt", free, free, later)
	assert.Equal(t, int64(400_000-800_000+3*200_000), lv[llmrate.KeyTokens], "the debt is still owed after 3 minutes")
	// An old key comes back exactly full: 200 admitted, not more.
	n := 0
	for admit("sk-old-7", 1, later).Allowed {
		n++
	}
	assert.Equal(t, 200, n)
}

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

// TestMemoryIdentitiesBounded: 300,000 admit+reconcile pairs with
// identities over 60 s of the requests' clock. The store holds the last
// 5 s's admissions and the last 30 s's reconciles (and a few per shard not
// yet popped), expiry examines each identity once and a bounded number per
// request, and nothing is forgotten early at this rate.
func TestMemoryIdentitiesBounded(t *testing.T) {
	s := llmrate.NewMemoryStore()
	huge := llmrate.Limits{RequestsPerMinute: llmrate.MaxPerMinute, TokensPerMinute: llmrate.MaxPerMinute}
	ctx := context.Background()
	const pairs, span = 300_000, 60 * time.Second
	step := span / pairs
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	const slack = 16 * 5 // a few not yet popped in each of 16 shards
	var touched int64
	for i := range pairs {
		now := t0.Add(time.Duration(i+1) * step)
		id := "id-" + strconv.Itoa(i)
		d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: "sk-m", Workspace: "sk-m", KeyLimits: huge, WorkspaceLimits: huge, Tokens: 100, Solo: true, Now: now, ID: id})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: "sk-m", Workspace: "sk-m", KeyLimits: huge, WorkspaceLimits: huge,
			Estimate: 100, Actual: 120, Solo: true, Now: now, ID: id}))
		if (i+1)%10_000 == 0 {
			admits, recons, tn := llmrate.IDRecords(s)
			liveA, liveR := min(i+1, int(5*time.Second/step)), min(i+1, int(30*time.Second/step))
			assert.LessOrEqual(t, admits, liveA+slack, "after %d pairs: admissions held", i+1)
			assert.LessOrEqual(t, recons, liveR+slack, "after %d pairs: reconciles held", i+1)
			assert.GreaterOrEqual(t, recons, liveR-1, "after %d pairs: reconciles held", i+1)
			assert.LessOrEqual(t, tn-touched, int64(2*2*10_000), "pairs %d..%d: identities examined", i-9_999, i)
			touched = tn
		}
	}
	_, _, tn := llmrate.IDRecords(s)
	assert.LessOrEqual(t, tn, int64(2*pairs), "identities examined, each at most once")
	assert.Zero(t, s.ForgottenIDs(), "identities forgotten before the end of their life")
}

// TestMemoryIdentitiesAtTheirBound: a store at its bound of identities
// forgets the oldest for room and counts each; a resent reconcile among
// the last ones is still applied once; one resent past 30 s may be
// applied again.
func TestMemoryIdentitiesAtTheirBound(t *testing.T) {
	s := llmrate.NewMemoryStore()
	llmrate.SetIDBounds(s, 16, 32) // 1 and 2 per shard
	lim := llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000}
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	rec := func(id string, at time.Time) {
		require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: "sk-b", Workspace: "sk-b", KeyLimits: lim, WorkspaceLimits: lim,
			Estimate: 100, Actual: 1_100, Solo: true, Now: at, ID: id}))
	}
	tokens := func(at time.Time) int64 { return s.Levels("sk-b", "sk-b", lim, lim, at)[llmrate.KeyTokens] }
	for i := range 100 {
		rec("r-"+strconv.Itoa(i), now)
	}
	_, recons, _ := llmrate.IDRecords(s)
	assert.LessOrEqual(t, recons, 32, "reconciles held")
	assert.GreaterOrEqual(t, s.ForgottenIDs(), int64(100-32), "identities forgotten for room")
	// 100 debits of 1,000 from a capacity of 2,000,000, the clock unmoved.
	require.Equal(t, int64(2_000_000-100*1_000), tokens(now))
	rec("r-99", now) // the last one is held: not applied again
	assert.Equal(t, int64(2_000_000-100*1_000), tokens(now), "the last reconcile, resent, applied again")

	// Past 30 s an identity is no longer held: a resend may be applied.
	later := now.Add(31 * time.Second)
	before := tokens(later)
	rec("r-99", later)
	assert.LessOrEqual(t, tokens(later), before, "a resend past 30 s")
}

// TestMemoryAdmissionIdentityWithin5s: an admission resent within 5 s gets
// its first decision and debits nothing again, with the record holding
// admissions at its bound.
func TestMemoryAdmissionIdentityWithin5s(t *testing.T) {
	s := llmrate.NewMemoryStore()
	llmrate.SetIDBounds(s, 16, 32)
	lim := llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: 1_000_000}
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	adm := func(id string, at time.Time) llmrate.Decision {
		d, err := s.Admit(ctx, llmrate.AdmitRequest{Key: "sk-a", Workspace: "sk-a", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 100, Solo: true, Now: at, ID: id})
		require.NoError(t, err)
		return d
	}
	for i := range 40 {
		adm("a-"+strconv.Itoa(i), now)
	}
	first := adm("a-39", now) // resent at once
	again := adm("a-39", now.Add(4*time.Second))
	assert.Equal(t, first, again, "a resend within 5 s")
	assert.Equal(t, int64(2_000_000-40*100), s.Levels("sk-a", "sk-a", lim, lim, now)[llmrate.KeyTokens], "resends debited again")
	admits, _, _ := llmrate.IDRecords(s)
	assert.LessOrEqual(t, admits, 16, "admissions held")
}

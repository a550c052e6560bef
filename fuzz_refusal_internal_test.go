package llmrate

import (
	"context"
	"testing"
	"time"
)

// FuzzRefusalChangesNothing: whatever the key's and the workspace's
// figures, the levels the buckets were brought to (fractions of a unit
// included: the clock moves by nanoseconds), the request, Solo or not:
//   - the request is admitted exactly when each of the four buckets holds
//     its need (1 request, n tokens) in whole units;
//   - a refusal leaves all four buckets exactly as they were, whole units
//     and fractions;
//   - an admission takes exactly 1 from each requests bucket and n from
//     each tokens bucket, and leaves every fraction as it was.
func FuzzRefusalChangesNothing(f *testing.F) {
	f.Add(int64(10), int64(100), int64(20), int64(300), uint16(3), int64(50), int64(1000), uint32(7), false)
	f.Add(int64(10), int64(100), int64(20), int64(300), uint16(25), int64(9), int64(150), uint32(999_999_937), false)
	f.Add(int64(7), int64(1000), int64(7), int64(1000), uint16(13), int64(77), int64(1999), uint32(123_456_789), true)
	f.Add(int64(1), int64(1), int64(1), int64(1), uint16(1), int64(1), int64(1), uint32(59_999_999), false)
	f.Fuzz(func(t *testing.T, krpm, ktpm, wrpm, wtpm int64, drain uint16, drainTok, n int64, gapNS uint32, solo bool) {
		kl := Limits{RequestsPerMinute: 1 + abs(krpm)%1000, TokensPerMinute: 1 + abs(ktpm)%1_000_000}
		wl := Limits{RequestsPerMinute: 1 + abs(wrpm)%1000, TokensPerMinute: 1 + abs(wtpm)%1_000_000}
		key, ws := "k", "w"
		if solo { // a key that is its own workspace, with equal figures
			wl, key, ws = kl, "w", "w"
		}
		n = 1 + abs(n)%(3*max(kl.TokensPerMinute, wl.TokensPerMinute))
		s := NewMemoryStore()
		now := time.Unix(1_700_000_000, 0)
		ctx := context.Background()
		req := AdmitRequest{Key: key, Workspace: ws, KeyLimits: kl, WorkspaceLimits: wl, Solo: solo}
		for i := 0; i < int(drain)%(2*int(max(kl.RequestsPerMinute, wl.RequestsPerMinute))+2); i++ {
			req.Tokens, req.Now = 1+abs(drainTok)%kl.TokensPerMinute, now
			if _, err := s.Admit(ctx, req); err != nil {
				t.Fatal(err)
			}
			now = now.Add(time.Duration(1 + gapNS%997)) // a few ns: the refill leaves fractions
		}
		now = now.Add(time.Duration(gapNS))
		before := s.exactLevels(key, ws, "", kl, wl, now)
		req.Tokens, req.Now = n, now
		d, err := s.Admit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		after := s.exactLevels(key, ws, "", kl, wl, now)
		need := [4]int64{1, n, 1, n}
		fits := true
		for i, b := range before {
			fits = fits && b.Level >= need[i]
		}
		if d.Allowed != fits {
			t.Fatalf("allowed %v with levels %+v for %d tokens", d.Allowed, before, n)
		}
		if !d.Allowed {
			if before != after {
				t.Fatalf("refusal at %v changed %+v → %+v", d.Refused, before, after)
			}
			return
		}
		for i := range after {
			if after[i].Frac != before[i].Frac || after[i].Level != before[i].Level-need[i] {
				t.Fatalf("admission of %d tokens: bucket %v went %+v → %+v", n, Bucket(i), before[i], after[i])
			}
		}
	})
}

func abs(v int64) int64 {
	if v < 0 {
		if v == -1<<63 {
			return 1<<63 - 1
		}
		return -v
	}
	return v
}

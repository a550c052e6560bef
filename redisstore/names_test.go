package redisstore_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyedHash is the documented name hash, computed here with crypto/hmac
// alone: the first 12 bytes of HMAC-SHA256(secret, tag 0 v), in hex.
func keyedHash(secret []byte, tag, v string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(tag + "\x00" + v))
	return hex.EncodeToString(m.Sum(nil)[:12])
}

// TestKeyNamesAreKeyedHashes: the entries that admissions write from many
// goroutines at once (solo, with a separate workspace, with a model entry)
// are named exactly by the documented layout, each name computed from its
// own request (the store reuses hash states across calls), and Keys and
// ModelKeys return the same names.
func TestKeyNamesAreKeyedHashes(t *testing.T) {
	_, c := redisrig.Start(t)
	secret := []byte("names-test-secret-0123")
	s, err := redisstore.New(c, redisstore.WithPrefix("nm"), redisstore.WithHashKey(secret), redisstore.WithTimeout(time.Second))
	require.NoError(t, err)
	free := llmrate.DefaultTiers().Free
	want := map[string]bool{}
	type req struct{ key, ws, model string }
	var reqs []req
	for i := range 40 {
		key := fmt.Sprintf("sk-%d-%s", i, string(make([]byte, i*7))) // long keys too
		r := req{key: key, ws: key}
		switch i % 3 {
		case 1:
			r.ws = fmt.Sprintf("ws-%d", i%4)
		case 2:
			r.ws, r.model = fmt.Sprintf("ws-%d", i%4), "gpt-4o*"
		}
		reqs = append(reqs, r)
		base := "nm:{" + keyedHash(secret, "w", r.ws) + "}:"
		if r.model != "" {
			base += "m:" + keyedHash(secret, "m", r.model) + ":"
		}
		want[base+"w"] = true
		if r.ws != r.key {
			want[base+"k:"+keyedHash(secret, "k", r.key)] = true
		}
		k, w := s.ModelKeys(r.key, r.ws, r.model)
		assert.Equal(t, base+"k:"+keyedHash(secret, "k", r.key), k)
		assert.Equal(t, base+"w", w)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < len(reqs); i += 8 {
				r := reqs[i]
				d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: r.key, Workspace: r.ws, Model: r.model,
					KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Solo: r.ws == r.key, Now: time.Now()})
				assert.NoError(t, err)
				assert.True(t, d.Allowed)
			}
		})
	}
	wg.Wait()
	keys, err := c.Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	got := map[string]bool{}
	for _, k := range keys {
		got[k] = true
	}
	assert.Equal(t, want, got)
}

// TestRefillLargeFiguresMatchMemoryStore: refills whose rate × elapsed
// microseconds lie on either side of 2^52 (where the script leaves its
// one-division path for its exact limb arithmetic), up to MaxPerMinute
// figures, leave exactly the levels the memory store computes.
func TestRefillLargeFiguresMatchMemoryStore(t *testing.T) {
	_, c := redisrig.Start(t)
	var now time.Time
	rs := redisrig.Store(t, c, redisstore.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	type tc struct{ tpm, dtUs int64 }
	cases := []tc{
		{1 << 32, 1<<20 - 1}, {1 << 32, 1 << 20}, {1 << 32, 1<<20 + 1}, // rate×dt = 2^52 - 2^32, 2^52, 2^52 + 2^32
		{llmrate.MaxPerMinute, 4503}, {llmrate.MaxPerMinute, 4504}, // just under and over 2^52
		{llmrate.MaxPerMinute, 59_999_999}, {llmrate.MaxPerMinute, 60_000_001}, {llmrate.MaxPerMinute, 119_999_999},
		{999_999_999_989, 7_777_777}, {3, 1}, {3, 19_999_999}, {200_000, 1},
	}
	rng := rand.New(rand.NewPCG(5, 11))
	for range 40 {
		cases = append(cases, tc{1 + rng.Int64N(llmrate.MaxPerMinute), 1 + rng.Int64N(130_000_000)})
	}
	for i, cs := range cases {
		mem := llmrate.NewMemoryStore()
		now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		lim := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: cs.tpm}
		key := fmt.Sprintf("big-%d", i)
		for _, step := range []struct{ dt, tokens int64 }{
			{0, 2*cs.tpm - 1}, // drain all but one token
			{cs.dtUs, 1},      // refill, and take one
			{cs.dtUs / 3, 1},  // again, from a fractional remainder
		} {
			now = now.Add(time.Duration(step.dt) * time.Microsecond)
			req := llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: lim, WorkspaceLimits: lim, Tokens: step.tokens, Solo: true, Now: now}
			want, err := mem.Admit(ctx, req)
			require.NoError(t, err)
			got, err := rs.Admit(ctx, req)
			require.NoError(t, err)
			want.RetryAfter = (want.RetryAfter + time.Second - 1).Truncate(time.Second)
			require.Equal(t, want, got, "case %d %+v", i, cs)
		}
	}
}

// TestCallerGivingUpIsNotARedisFailure: admissions whose callers cancel
// their contexts before Redis answers (here: before the call) fail, but
// are not counted as Redis failures: three of them in a row do not stop
// the store trying Redis (which a failing Redis does, for
// WithRetryInterval), batched or not. (A deadline passing is counted:
// TestDeadlineCountsAsRedisFailure.)
func TestCallerGivingUpIsNotARedisFailure(t *testing.T) {
	_, c := redisrig.Start(t)
	free := llmrate.DefaultTiers().Free
	for _, batch := range []int{1, 64} {
		s := redisrig.Store(t, c, redisstore.WithBatching(batch), redisstore.WithRetryInterval(time.Hour))
		gone, cancel := context.WithCancel(context.Background())
		cancel()
		req := llmrate.AdmitRequest{Key: "sk-g", Workspace: "sk-g", KeyLimits: free, WorkspaceLimits: free, Tokens: 1, Solo: true, Now: time.Now()}
		for range 5 {
			_, err := s.Admit(gone, req)
			require.ErrorIs(t, err, context.Canceled, "batch %d", batch)
		}
		assert.Zero(t, s.Errors(), "batch %d: no Redis failure counted", batch)
		d, err := s.Admit(context.Background(), req)
		require.NoError(t, err, "batch %d: the store still tries Redis", batch)
		assert.True(t, d.Allowed)
	}
}

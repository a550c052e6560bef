package redisstore_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
)

// TestTimedEntriesOutliveTheirDebts extends TestEntryOutlivesItsDebt
// (a Solo key, admissions only) to a key in a workspace of its own, on the
// server's clock: admissions of random sizes, with and without an ID,
// reconciles charging far past the estimate or refunding, by several
// scripts (admit.lua, reconcile.lua), and figures changing between calls.
// After every call both entries must live at least until time alone
// refills them to full under that call's figures (from the levels the
// entry holds); and an entry that records its expiry (exp, 48 bytes) must
// not expire earlier than it records, since later admissions trust it.
func TestTimedEntriesOutliveTheirDebts(t *testing.T) {
	_, c := redisrig.Start(t)
	for _, batching := range []int{1, 8} {
		t.Run(fmt.Sprintf("batching=%d", batching), func(t *testing.T) {
			s := redisrig.Store(t, c, redisstore.WithBatching(batching))
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(5, uint64(batching)))
			figures := []llmrate.Limits{
				{RequestsPerMinute: 600, TokensPerMinute: 60_000},
				{RequestsPerMinute: 5, TokensPerMinute: 900},
				{RequestsPerMinute: 100_000, TokensPerMinute: 50_000_000},
			}
			key, ws := "sk-entry", "ws-entry"
			kname, wname := s.Keys(key, ws)
			kl, wl := figures[0], figures[0]
			for i := range 400 {
				if rng.IntN(8) == 0 {
					kl, wl = figures[rng.IntN(3)], figures[rng.IntN(3)]
				}
				tokens := rng.Int64N(2 * min(kl.TokensPerMinute, wl.TokensPerMinute))
				r := llmrate.AdmitRequest{Key: key, Workspace: ws, KeyLimits: kl, WorkspaceLimits: wl, Tokens: tokens}
				if rng.IntN(2) == 0 {
					r.ID = llmrate.NewAdmissionID()
				}
				d, err := s.Admit(ctx, r)
				require.NoError(t, err)
				what := fmt.Sprintf("step %d, admission %+v -> %+v", i, r, d)
				if d.Allowed && rng.IntN(2) == 0 {
					rec := llmrate.ReconcileRequest{Key: key, Workspace: ws, KeyLimits: kl, WorkspaceLimits: wl, Estimate: tokens, ID: r.ID}
					switch rng.IntN(3) {
					case 0:
						rec.Refund = true
					default:
						rec.Actual = rng.Int64N(6 * max(kl.TokensPerMinute, wl.TokensPerMinute))
					}
					require.NoError(t, s.Reconcile(ctx, rec))
					what = fmt.Sprintf("step %d, reconcile %+v", i, rec)
				}
				checkEntry(t, c, kname, kl, what)
				checkEntry(t, c, wname, wl, what)
			}
		})
	}
}

// checkEntry checks that the entry at name lives until time alone
// refills it to full under lim, and no earlier than its recorded exp.
func checkEntry(t *testing.T, c *redis.Client, name string, lim llmrate.Limits, what string) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	v, err := c.Get(ctx, name).Bytes()
	require.NoError(t, err, "%s: entry %s missing", what, name)
	ttl, err := c.PTTL(ctx, name).Result()
	require.NoError(t, err)
	now, err := c.Time(ctx).Result()
	require.NoError(t, err)
	elapsed := time.Since(start)
	require.True(t, len(v) == 40 || len(v) == 48, "%s: entry of %d bytes", what, len(v))
	f := func(i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(v[8*i:])) }
	rl, tl := f(1), f(3)
	need := 0.0
	if c := float64(2 * lim.RequestsPerMinute); rl < c {
		need = max(need, (c-rl)*60000/float64(lim.RequestsPerMinute))
	}
	if c := float64(2 * lim.TokensPerMinute); tl < c {
		need = max(need, (c-tl)*60000/float64(lim.TokensPerMinute))
	}
	needD := time.Duration(math.Ceil(need)) * time.Millisecond
	if ttl+elapsed < needD {
		t.Errorf("%s: entry %s (%d bytes, requests %v, tokens %v) expires in %v, before it is full again (%v): its debt would be forgotten", what, name, len(v), rl, tl, ttl, needD)
	}
	if len(v) == 48 {
		exp := time.UnixMicro(int64(f(5)))
		recorded := exp.Sub(now)
		if ttl+elapsed+2*time.Millisecond < recorded {
			t.Errorf("%s: entry %s records its expiry %v from now but expires in %v", what, name, recorded, ttl)
		}
	}
}

// TestDebtUnderSmallerFigures: a key that ran into debt under large
// figures (a tier of 10^12 tokens a minute, a reconcile charging twice its
// capacity) and is then held to small ones (a tier change to 1 token a
// minute) owes for longer than any expiry Redis can be given in ms written
// as a Lua number. The memory store decides on (refusing, as the debt
// requires); Redis must too, on its own clock and on the caller's.
func TestDebtUnderSmallerFigures(t *testing.T) {
	_, c := redisrig.Start(t)
	for _, clocked := range []bool{false, true} {
		t.Run(fmt.Sprintf("clock=%v", clocked), func(t *testing.T) {
			now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
			var opts []redisstore.Option
			if clocked {
				opts = append(opts, redisstore.WithClock(func() time.Time { return now }))
			}
			s := redisrig.Store(t, c, append(opts, redisstore.WithBatching(1))...)
			mem := llmrate.NewMemoryStore()
			ctx := context.Background()
			big := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: llmrate.MaxPerMinute}
			small := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 1}
			key := "sk-entry-debt-" + fmt.Sprint(clocked)
			for _, st := range []llmrate.Store{mem, s} {
				r := llmrate.AdmitRequest{Key: key, Workspace: key, KeyLimits: big, WorkspaceLimits: big, Tokens: 1000, Solo: true, Now: now}
				d, err := st.Admit(ctx, r)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				rec := llmrate.ReconcileRequest{Key: key, Workspace: key, KeyLimits: big, WorkspaceLimits: big, Estimate: 1000, Actual: 4 * llmrate.MaxPerMinute, Solo: true, Now: now}
				require.NoError(t, st.Reconcile(ctx, rec), "%T: the reconcile into debt", st)
				r.KeyLimits, r.WorkspaceLimits, r.Tokens = small, small, 1
				d, err = st.Admit(ctx, r)
				require.NoError(t, err, "%T: the admission under the smaller figures", st)
				assert.False(t, d.Allowed, "%T: a key deep in debt admitted", st)
			}
		})
	}
}

// TestRepeatedIDNonSolo: admit.lua's identity record for a key in a
// workspace of its own, with and without a model entry (KEYS[3]): the
// same admission sent twice is answered with its first decision and
// debits once; a refused one is not recorded, so sent again once the
// bucket has refilled it is admitted. As the memory store does.
func TestRepeatedIDNonSolo(t *testing.T) {
	_, c := redisrig.Start(t)
	for _, model := range []string{"", "gpt-4o*"} {
		t.Run("model="+model, func(t *testing.T) {
			now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			rs := redisrig.Store(t, c, redisstore.WithClock(clock), redisstore.WithBatching(1))
			mem := llmrate.NewMemoryStore()
			ctx := context.Background()
			kl := llmrate.Limits{RequestsPerMinute: 60, TokensPerMinute: 600}
			wl := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 100_000}
			req := func(id string, tokens int64) llmrate.AdmitRequest {
				return llmrate.AdmitRequest{Key: "sk-rep", Workspace: "ws-rep", Model: model, KeyLimits: kl, WorkspaceLimits: wl, Tokens: tokens, ID: id, Now: now}
			}
			for _, st := range []llmrate.Store{mem, rs} {
				now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
				a := req("id-a", 700)
				d1, err := st.Admit(ctx, a)
				require.NoError(t, err)
				require.True(t, d1.Allowed, "%T", st)
				d2, err := st.Admit(ctx, a)
				require.NoError(t, err)
				d1.Receipt, d2.Receipt = "", ""
				assert.Equal(t, d1, d2, "%T: a repeat gets the first decision", st)
				b := req("id-b", 600) // 500 tokens left: refused
				d3, err := st.Admit(ctx, b)
				require.NoError(t, err)
				require.False(t, d3.Allowed, "%T", st)
				assert.Equal(t, int64(1200-700), d3.Remaining[llmrate.KeyTokens], "%T: debited once", st)
				now = now.Add(10 * time.Second) // +100 tokens: 600 fit
				b.Now = now
				d4, err := st.Admit(ctx, b)
				require.NoError(t, err)
				assert.True(t, d4.Allowed, "%T: a refused admission was recorded", st)
				assert.Equal(t, int64(0), d4.Remaining[llmrate.KeyTokens], "%T", st)
			}
		})
	}
}

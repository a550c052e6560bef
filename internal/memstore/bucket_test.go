package memstore

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBucketSteps(t *testing.T) {
	t.Parallel()
	const rate, capacity = 100, 200 // Free requests: 100/min, burst 200
	b := Bucket{Level: capacity}
	steps := []struct {
		name      string
		dt        time.Duration
		n         int64
		wantOK    bool
		wantLevel int64
	}{
		{"take the whole burst", 0, 200, true, 0},
		{"empty", 0, 1, false, 0},
		{"0.599s is not a unit yet", 599 * time.Millisecond, 1, false, 0},
		{"0.6s makes one", time.Millisecond, 1, true, 0},
		{"1.2s makes two", 1200 * time.Millisecond, 2, true, 0},
		{"backwards refills nothing", -time.Hour, 1, false, 0},
		{"an hour idle is exactly full", time.Hour, 201, false, 200},
		{"and the full burst is there", 0, 200, true, 0},
	}
	for _, s := range steps {
		b.Refill(rate, capacity, int64(s.dt))
		ok := b.Level >= s.n
		if ok {
			b.Level -= s.n
		}
		assert.Equal(t, s.wantOK, ok, s.name)
		assert.Equal(t, s.wantLevel, b.Level, s.name)
	}
}

// TestBucketExactAgainstBigRat checks refill against exact rational
// arithmetic for random figures up to maxPerMinute and random slicings of
// elapsed time up to years: no drift, no overflow.
func TestBucketExactAgainstBigRat(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		rate := 1 + r.Int64N(maxPerMinute)
		capacity := 2 * rate
		start := r.Int64N(capacity + 1)
		b := Bucket{Level: start}
		exact := new(big.Rat).SetInt64(start)
		var total int64
		for range 1 + r.IntN(20) {
			var dt int64
			switch r.IntN(3) {
			case 0:
				dt = r.Int64N(int64(time.Second))
			case 1:
				dt = r.Int64N(int64(time.Minute))
			default:
				dt = r.Int64N(int64(5 * 365 * 24 * time.Hour))
			}
			total += dt
			b.Refill(rate, capacity, dt)
			// exact Level: min(capacity, start + rate*elapsed/Minute),
			// valid while the bucket never hit capacity in between; we
			// compare in the unclamped region or against capacity.
			exact.Add(exact, new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(rate), big.NewInt(dt)), big.NewInt(int64(Minute))))
			if exact.Cmp(new(big.Rat).SetInt64(capacity)) >= 0 {
				exact.SetInt64(capacity)
			}
			got := new(big.Rat).Add(new(big.Rat).SetInt64(b.Level), big.NewRat(b.Frac, int64(Minute)))
			require.Zero(t, exact.Cmp(got), "rate %d start %d after %d ns: got %s want %s", rate, start, total, got.FloatString(9), exact.FloatString(9))
		}
	}
}

func TestBucketWait(t *testing.T) {
	t.Parallel()
	b := Bucket{Level: 0}
	d, never := b.Wait(1, 100, 200, time.Minute)
	assert.False(t, never)
	assert.Equal(t, 600*time.Millisecond, d, "one request at 100/min")
	d, _ = b.Wait(2, 100, 200, time.Minute)
	assert.Equal(t, 1200*time.Millisecond, d)
	_, never = b.Wait(201, 100, 200, time.Minute)
	assert.True(t, never, "more than the capacity never fits")
	d, _ = b.Wait(200, 1, 2, time.Minute)
	assert.Equal(t, time.Minute, d, "waits past the limit report the limit")
	b = Bucket{Level: 0, Frac: int64(Minute) - 1} // a hair under one unit
	d, _ = b.Wait(1, maxPerMinute, 2*maxPerMinute, time.Minute)
	assert.Equal(t, time.Duration(1), d, "rounds up to the next nanosecond")
	b = Bucket{Level: -2 * 2 * maxPerMinute}
	d, _ = b.Wait(2*maxPerMinute, maxPerMinute, 2*maxPerMinute, time.Minute)
	assert.Equal(t, time.Minute, d, "deep debt at the largest figure does not overflow")
}

func TestBucketAdjust(t *testing.T) {
	t.Parallel()
	b := Bucket{Level: 100}
	b.Adjust(-1000, 400)
	assert.Equal(t, int64(400), b.Level, "credit caps at capacity")
	b.Adjust(2000, 400)
	assert.Equal(t, int64(-800), b.Level, "debit may go into debt, floored at -2×capacity")
	b.Adjust(1<<62, 400)
	assert.Equal(t, int64(-800), b.Level, "huge debit cannot wrap around")
	b.Refill(200, 400, int64(time.Hour))
	assert.Equal(t, int64(400), b.Level, "an idle hour brings a bucket in debt back exactly full")
}

// maxPerMinute is the root's MaxPerMinute, the largest per-minute figure
// the arithmetic must be exact for.
const maxPerMinute = 1_000_000_000_000

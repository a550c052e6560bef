package llmrate

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

// scaleEstimate is ⌈raw × min(4, max(1/4, act/rw))⌉, at least 1, saturating
// at the int64 maximum, over the whole domain: checked against big.Rat.
func TestScaleEstimate(t *testing.T) {
	const maxInt = 1<<63 - 1
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func(hi int64, edges ...int64) int64 {
		if rng.IntN(4) == 0 {
			return edges[rng.IntN(len(edges))]
		}
		return rng.Int64N(hi) + 1
	}
	for range 50_000 {
		raw := pick(maxInt, 1, 2, 3, 4, maxInt, maxInt/4, maxInt/4+1, 1<<40)
		rw := pick(64*calibrationMaxSample, 8, 64*calibrationMaxSample, 1000)
		act := pick(64*calibrationMaxSample, 0, 1, 4*rw, 4*rw+1, rw/4, rw/4-1, rw) - 1
		act = max(0, min(act, 64*calibrationMaxSample))
		r := new(big.Rat).SetFrac64(act, rw)
		if lo := big.NewRat(1, 4); r.Cmp(lo) < 0 {
			r = lo
		}
		if hi := big.NewRat(4, 1); r.Cmp(hi) > 0 {
			r = hi
		}
		x := new(big.Rat).Mul(r, new(big.Rat).SetInt64(raw))
		q, m := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
		if m.Sign() > 0 {
			q.Add(q, big.NewInt(1))
		}
		want := int64(maxInt)
		if q.IsInt64() {
			want = max(1, q.Int64())
		}
		if got := scaleEstimate(raw, act, rw); got != want {
			t.Fatalf("scaleEstimate(%d, %d, %d) = %d, want %d", raw, act, rw, got, want)
		}
	}
}

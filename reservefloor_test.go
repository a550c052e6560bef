package llmrate_test

import (
	"math"
	"math/big"
	"testing"

	"github.com/llmrate/llmrate"
)

// TestReserveFloor checks ReserveFloor against big.Int ceilings, including
// capacities where r × c overflows int64.
func TestReserveFloor(t *testing.T) {
	caps := []int64{0, 1, 2, 3, 7, 10, 999_999, 1_000_000, 1_000_001, 123_456_789, 1 << 40, math.MaxInt64 / 3, math.MaxInt64}
	res := []int64{0, 1, 2, 333_333, 500_000, 999_999}
	for _, c := range caps {
		for _, r := range res {
			want := new(big.Int).Mul(big.NewInt(r), big.NewInt(c))
			q, m := new(big.Int).QuoRem(want, big.NewInt(1_000_000), new(big.Int))
			if m.Sign() != 0 {
				q.Add(q, big.NewInt(1))
			}
			if got := llmrate.ReserveFloor(r, c); got != q.Int64() {
				t.Errorf("ReserveFloor(%d, %d) = %d, want %d", r, c, got, q.Int64())
			}
		}
	}
	if got := llmrate.ReserveFloor(-5, 100); got != 0 {
		t.Errorf("negative reserve: %d, want 0", got)
	}
}

// TestReserveFloorAboveMaxReserve: a reserve above MaxReserve is a floor
// of MaxReserve's, as every store decides it (the Store contract: "above
// MaxReserve: MaxReserve"), so a store that passes AdmitRequest.Reserve
// through unclamped never gets a floor above the capacity, a negative one,
// or a panic.
func TestReserveFloorAboveMaxReserve(t *testing.T) {
	for _, c := range []int64{1, 100, 2_000_000_000_000, math.MaxInt64} {
		want := new(big.Int).Mul(big.NewInt(llmrate.MaxReserve), big.NewInt(c))
		q, m := new(big.Int).QuoRem(want, big.NewInt(1_000_000), new(big.Int))
		if m.Sign() != 0 {
			q.Add(q, big.NewInt(1))
		}
		for _, r := range []int64{1_000_000, 1_500_000, 2_000_000, 1 << 40, math.MaxInt64} {
			var got int64
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("ReserveFloor(%d, %d) panicked: %v", r, c, p)
					}
				}()
				got = llmrate.ReserveFloor(r, c)
			}()
			if got != q.Int64() {
				t.Errorf("ReserveFloor(%d, %d) = %d, want MaxReserve's %d", r, c, got, q.Int64())
			}
		}
	}
}

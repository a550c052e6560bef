package memstore

import "fmt"

// Check reports, with the store quiet (no call in progress), whether every
// table is whole: its count matches its live entries, each found by Get
// and by Lookup, no entry left locked. For tests: nil when whole.
func (t *Tables) Check() []error {
	var errs []error
	for _, shards := range []*[Shards]Shard{&t.keys, &t.ws} {
		for i := range shards {
			sh := &shards[i]
			sh.Mu.Lock()
			live := 0
			for idx := range sh.t.top {
				e := sh.t.at(idx)
				if e.lk.Load()&1 != 0 {
					errs = append(errs, fmt.Errorf("shard %d: entry %d left locked", i, idx))
					continue
				}
				if e.h == 0 {
					continue
				}
				live++
				if sh.t.Get(e.h) != e {
					errs = append(errs, fmt.Errorf("shard %d: entry %d not found by get", i, idx))
				}
				if got := sh.t.Lookup(e.h); got != e {
					errs = append(errs, fmt.Errorf("shard %d: entry %d not found by lookup", i, idx))
				} else {
					got.Unlock()
				}
			}
			if live != sh.t.n {
				errs = append(errs, fmt.Errorf("shard %d: %d live entries, count says %d", i, live, sh.t.n))
			}
			sh.Mu.Unlock()
		}
	}
	return errs
}

// WinSets returns the number of window sets the workspace shards hold.
func (t *Tables) WinSets() int {
	n := 0
	for i := range t.ws {
		t.ws[i].Mu.Lock()
		n += len(t.ws[i].wins)
		t.ws[i].Mu.Unlock()
	}
	return n
}

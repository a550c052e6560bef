package memstore

import (
	"math"
	"time"
)

// The store's rolling windows (the root's Limits.Windows), kept apart from
// the entries so that an admission without windows costs what it did
// before windows existed: a windowed admission or reconcile takes the
// locked path (both shards' locks, as under a gauge), and finds its window
// buckets in its shards' window sets, by the hash of the entry they belong
// to (a key's in its key shard, a workspace's, or a Solo request's, in its
// workspace shard).

// WinSet is the window buckets of one entry hash: one per (meter, Per)
// seen, each with the figure of its latest admission and a clock of its
// own (as a Redis window entry has).
type WinSet struct {
	Last int64 // the latest clock reading seen
	// Full is the clock reading by which time alone refills every bucket
	// to full under the figures of its latest use (math.MaxInt64: not
	// known to); Debt whether a bucket was below zero after the latest use.
	// A caller holding sets it is filling may set both so (Full
	// math.MaxInt64, Debt true) to keep the set from being swept or
	// evicted until it calls Settle.
	Full int64
	Debt bool
	B    []WinBucket
}

// WinBucket is one window bucket: capacity Fig, refilled Fig per Per
// nanoseconds, in the exact arithmetic of Bucket with the period Per (its
// fraction is in 1/Per units), up to Last, its clock.
//
// A store keeps levels, not figures: Fig is the figure of the bucket's
// latest admission, which alone sets it (a changed figure keeps the
// level, clamped to it). A reconcile carries the figures in force at its
// admission, maybe changed since: it refills the buckets it charges at
// Fig, not at its own, and leaves the others (clock included) alone.
type WinBucket struct {
	Per   int64
	Fig   int64
	Last  int64
	Meter uint8 // the index of its meter in the root's WindowMeters rows
	Bucket
}

// WinFigures is one of an admission's rolling windows as Advance reads
// it: its length (Per) and its figure of each meter (Figs, in the root's
// WindowMeters order: requests, tokens, input, output; 0: that meter is
// not limited). Figures as data, not a function to call: Advance looks
// one up for each bucket of every windowed admission
// (bench/memstore-move-instructions.txt).
type WinFigures struct {
	Per  int64
	Figs [4]int64
}

// Find returns the bucket of meter m and window per, creating it full at
// fig, its clock at now (the set's: the latest reading seen), if absent.
func (ws *WinSet) Find(m uint8, per, fig, now int64) *WinBucket {
	for i := range ws.B {
		if ws.B[i].Meter == m && ws.B[i].Per == per {
			return &ws.B[i]
		}
	}
	ws.B = append(ws.B, WinBucket{Per: per, Fig: fig, Last: now, Meter: m, Bucket: Bucket{Level: fig}})
	return &ws.B[len(ws.B)-1]
}

// Refill refills wb up to now at its figure (a level above it, the figure
// lowered since, is clamped). A clock reading earlier than its clock
// refills nothing.
func (wb *WinBucket) Refill(now int64) {
	dt := now - wb.Last
	if dt > 0 {
		wb.Last = now
	} else {
		dt = 0
	}
	wb.Prefill(wb.Fig, wb.Fig, dt, uint64(wb.Per))
}

// Advance refills, up to now, the buckets whose window is among at (an
// admission's rolling windows; nil for a reconcile's), each at its figure
// there (a changed figure clamps the level), and leaves the others as
// they are, clock included. A bucket that time alone has refilled to full
// at its own figure is forgotten, as a Redis entry expires: dropped, or,
// with a figure, full again at it.
func (ws *WinSet) Advance(now int64, at []WinFigures) {
	ws.Last = max(ws.Last, now)
	kept := ws.B[:0]
	for _, wb := range ws.B {
		var f int64
		for i := range at {
			if at[i].Per == wb.Per {
				f = at[i].Figs[wb.Meter&3]
				break
			}
		}
		c := wb
		c.Refill(now)
		switch full := c.Level >= c.Fig; {
		case f > 0 && full:
			kept = append(kept, WinBucket{Per: wb.Per, Fig: f, Last: c.Last, Meter: wb.Meter, Bucket: Bucket{Level: f}})
		case f > 0:
			wb.Fig = f
			wb.Refill(now)
			kept = append(kept, wb)
		case !full:
			kept = append(kept, wb)
		}
	}
	clear(ws.B[len(kept):])
	ws.B = kept
}

// Settle records, after a use, when time alone refills every bucket to
// full and whether one is in debt. limit bounds the wait computed (the
// root passes 4 × MaxWindow): a set not full by then is never swept.
func (ws *WinSet) Settle(limit time.Duration) {
	if ws == nil {
		return
	}
	ws.Debt, ws.Full = false, ws.Last
	for i := range ws.B {
		wb := &ws.B[i]
		if wb.Level < 0 {
			ws.Debt = true
		}
		d, _ := wb.PWait(wb.Fig, wb.Fig, wb.Fig, limit, uint64(wb.Per))
		if d >= limit {
			ws.Full = math.MaxInt64
			return
		}
		ws.Full = max(ws.Full, wb.Last+int64(d))
	}
}

// PeekRolling is the level an admission at now under figure f would find
// in wb (the rule of an admission's refill, on a copy): full at f once
// time alone has refilled it at its own figure, else refilled at f,
// clamped.
func PeekRolling(wb WinBucket, f, now int64) int64 {
	c := wb
	if c.Refill(now); c.Level >= c.Fig {
		return f
	}
	wb.Fig = f
	wb.Refill(now)
	return wb.Level
}

// WinSetAt returns the window set of entry hash h in sh, nil if none. The
// caller holds sh.Mu.
func (sh *Shard) WinSetAt(h uint64) *WinSet { return sh.wins[h] }

// NewWinSet returns a new, empty window set for entry hash h in sh, which
// has none (WinSetAt). The caller holds sh.Mu. Creating one may first drop the sets
// that time alone has refilled (lossless); at the bound, when those it
// visits are not enough, it goes beyond the bound (ev.Over): a set that
// holds spend is never evicted, in debt or not (a window spent to 0 is a
// quota held against its key, kept as a debt).
//
// A new set takes its entry's clock (last): the latest reading seen, so
// that a clock moving backwards refills nothing there either.
func (sh *Shard) NewWinSet(bound int, h uint64, now, last int64, ev *Evicted) *WinSet {
	if sh.wins == nil {
		sh.wins = make(map[uint64]*WinSet)
		sh.winSweepAt = minSweep
	}
	if len(sh.wins) >= sh.winSweepAt {
		for k, ws := range sh.wins {
			if now >= ws.Full {
				delete(sh.wins, k)
			}
		}
		sh.winSweepAt = max(minSweep, 2*len(sh.wins))
	}
	if len(sh.wins) >= bound {
		// A set that is not full holds spend against its key (a window
		// spent to 0 is not in debt, but dropping it would give a day's
		// quota back): it is kept, as a debt is. Only full sets go.
		visited := 0
		for k, ws := range sh.wins {
			if visited++; visited > evictVisit {
				break
			}
			if now >= ws.Full {
				delete(sh.wins, k)
				if len(sh.wins) < bound {
					break
				}
			}
		}
		if len(sh.wins) >= bound {
			ev.Over++
		}
	}
	ws := &WinSet{Last: last, Full: last}
	sh.wins[h] = ws
	return ws
}

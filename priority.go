package llmrate

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
)

// WithPriority keeps a share of every bucket and gauge from each class
// named in reserves, for everyone else: reserves {"batch": 0.5} keeps half
// of every bucket from batch, so that when a workspace runs short the
// batch job is refused first and the other classes (say "interactive",
// the person waiting on an answer, which needs no entry of its own) still
// find the kept half. The map names the classes held back, never the
// favoured one: every class not in it, and a request with no class, may
// spend every bucket to the bottom.
//
//	llmrate.WithPriority(llmrate.Header("X-Priority"), map[string]float64{
//		"batch": 0.5, // kept from batch; "interactive" and unclassed traffic may use it
//	})
//
// A reserve acts only where the classes share buckets: one key sending
// both (its four buckets), or keys of one workspace (its two workspace
// buckets; WithWorkspace puts keys in one). By default each key is its own
// workspace, so a batch key and an interactive key spend different
// buckets, and a reserve on the batch key only holds the batch key back
// from its own, protecting no one; plans and tiers resolve per workspace,
// and so do the workspace buckets a reserve protects.
//
// class names each request's priority class: e.g. Header("X-Priority"),
// or a function reading what your authentication layer knows of the key.
// A header the client sets lets the client pick its class: a client that
// sends no class header, or one not in reserves, has no reserve. Take the
// class from something the client cannot choose when that matters.
//
// reserves[name], in (0, 1), is the share of every bucket and gauge kept
// from the class name: a request of that class is admitted only if, after
// its debit, every bucket it spends (the per-minute buckets, whose capacity
// is twice the per-minute figure, and every window's, whose capacity is
// its figure) still holds at least ⌈reserve × capacity⌉, and every gauge
// it takes (Limits.ConcurrentRequests) keeps at least ⌈reserve × figure⌉
// slots free after taking its own. Each reserve is converted to whole
// millionths, rounded to the nearest (0.5 is 500,000; 1/3 is 333,333), and
// the floors are exact integers (ReserveFloor). Names match exactly. A
// request whose class is not a key of reserves, whose class is "", or
// whose extractor returns an error has no reserve: it may spend every
// bucket to the bottom, exactly as without WithPriority. So adding
// priorities only ever restricts the classes named.
//
// The reserve is held even while nobody uses it: that is what makes it a
// reserve. A class with reserve r that runs alone reaches (1 − r) of each
// bucket and never more, however idle the rest of the workspace is; with
// reserve 0.5 a batch job alone gets half of what the workspace could
// spend.
//
// The reserve is part of the store's one atomic decision (in the memory
// store and in Redis), with the model entries (WithModelLimits) and
// overrides whose buckets the request spends. A request it refuses gets
// the 429 of the bucket or gauge whose reserve stopped it, with
// Retry-After the wait until the request fits above the reserve (a
// gauge's: 1 s), and a message saying that the rest is kept for other
// traffic and naming the class; a request larger than a full bucket less
// its class's reserve never fits (Retry-After: 60, as for one larger than
// the bucket). With WithMaxWait a request of a reserved class is never
// held for a reservation (one is debited when granted, so it would take a
// bucket below the reserve at once): it is refused with the Retry-After
// until it fits above the reserve; requests without a reserve wait as
// usual. Shadow mode (WithShadow) decides as enforcement would.
// DecisionEvent.Class names the class when it is a key of reserves.
// Floors round up: under a gauge of 1 slot a class with any reserve is
// never admitted (its floor is the one slot), refused with Retry-After 1.
// A panic in class is a fault: the request fails open, as for the other
// extractors.
//
// The map is copied. nil class, an empty map, an empty name, and a reserve
// outside (0, 1) (NaN included), or one that rounds to 0 or to 1,000,000
// millionths, are *ConfigErrors.
func WithPriority(class Extractor, reserves map[string]float64) Option {
	return optionFunc(func(c *config) {
		if class == nil {
			c.fail("WithPriority", errors.New("nil class extractor"))
		}
		if len(reserves) == 0 {
			c.fail("WithPriority", errors.New("no reserves: name at least one class"))
		}
		m := make(map[string]int64, len(reserves))
		for name, r := range reserves {
			if name == "" {
				c.fail("WithPriority", errors.New(`class "": a request without a class never has a reserve`))
				continue
			}
			if math.IsNaN(r) || r <= 0 || r >= 1 {
				c.fail("WithPriority", fmt.Errorf("class %q: reserve %v outside (0, 1)", name, r))
				continue
			}
			mil := int64(math.Round(r * 1e6))
			if mil < 1 || mil > MaxReserve {
				c.fail("WithPriority", fmt.Errorf("class %q: reserve %v rounds to %d millionths: must be 1 to %d", name, r, mil, MaxReserve))
				continue
			}
			m[name] = mil
		}
		c.class, c.reserves = class, m
	})
}

// classOf returns r's priority class and its reserve in millionths: ("",
// 0) when WithPriority is off, or the class is not a key of the reserves
// (an unlisted name is never reported: it comes from the client), or the
// extractor failed. A panic propagates (identify recovers it: a fault).
func (c *config) classOf(r *http.Request) (string, int64) {
	name, err := c.class(r)
	if err != nil {
		return "", 0
	}
	if res, ok := c.reserves[name]; ok {
		return name, res
	}
	return "", 0
}

// reserveClause is what a refusal by a reserve adds to the limit it names:
// ", of which 50% is kept for other traffic (priority class batch)"; ""
// when the refusal did not come from a reserve.
func reserveClause(a *admission) string {
	if !a.d.ByReserve || a.class == "" {
		return ""
	}
	return ", of which " + reservePercent(a.reserve) + " is kept for other traffic (priority class " + a.class + ")"
}

// reservePercent writes a reserve in millionths as a percentage: "50%",
// "33.3333%".
func reservePercent(m int64) string {
	return strconv.FormatFloat(float64(m)/1e4, 'f', -1, 64) + "%"
}

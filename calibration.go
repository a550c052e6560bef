package llmrate

import (
	"math/big"
	"math/bits"
	"sync"
)

// Calibration bounds (docs/cost.md, "Learning the error").
const (
	// calibrationWindow is how many of a (workspace, model) pair's most
	// recent reconciles with final usage its ratio is learned from.
	calibrationWindow = 64
	// calibrationMinSamples is how many it takes before estimates scale.
	calibrationMinSamples = 8
	// calibrationMaxPairs is how many (workspace, model) pairs are learned
	// at once; the least recently used is dropped for a new one.
	calibrationMaxPairs = 4096
	// calibrationMaxName is the longest model name learned: names come
	// from clients, and a longer one is no model a provider serves.
	calibrationMaxName = 256
	// calibrationMaxWorkspace is the longest workspace learned (the key
	// itself without WithWorkspace): a longer one is not learned, so that
	// the pairs held stay small.
	calibrationMaxWorkspace = 1024
	// calibrationMaxSample caps each sample, so that the sums of a window
	// (and four times them) fit in 63 bits.
	calibrationMaxSample = 1 << 55
)

// Calibration returns, per model, the ratio of charge to raw estimate over
// every workspace's samples together: the sum of their charges over the
// sum of their raw estimates, bounded to [0.25, 4]; models with fewer than
// 8 samples in all are absent. It is a fleet view for dashboards: no
// admission uses it, as each workspace's admissions use its own ratios
// (CalibrationFor). Without WithCalibration it returns nil. The model ""
// stands for requests naming none (every request without WithModel).
func (l *Limiter) Calibration() map[string]float64 {
	if l.calib == nil {
		return nil
	}
	return l.calib.ratios(nil)
}

// CalibrationFor returns, per model, the ratio of charge to raw estimate
// that WithCalibration applies to workspace's admissions now, within
// [0.25, 4]; models for which the workspace has fewer than 8 samples are
// absent (their estimates are not scaled). Without WithCalibration it
// returns nil.
func (l *Limiter) CalibrationFor(workspace string) map[string]float64 {
	if l.calib == nil {
		return nil
	}
	return l.calib.ratios(&workspace)
}

// calKey names what is learned apart: one workspace's traffic on one model.
type calKey struct{ ws, model string }

// calibration learns, per workspace and model, the ratio of charge to raw
// estimate over the pair's most recent reconciles with final usage
// (WithCalibration). One mutex guards it: each admission and each learning
// reconcile holds it for a map lookup and a few words of arithmetic.
type calibration struct {
	mu     sync.Mutex
	models map[calKey]*calModel
	lru    calModel // sentinel of the recency ring: lru.next is the most recent
}

// calModel is one pair's window of samples, in a ring.
type calModel struct {
	key            calKey
	raw, actual    [calibrationWindow]int64
	n, at          int   // samples held; the slot the next one goes to
	sumRaw, sumAct int64 // of the samples held
	prev, next     *calModel
}

func newCalibration() *calibration {
	c := &calibration{models: make(map[calKey]*calModel)}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	return c
}

// learned reports whether a pair may be learned: names come from clients.
func learned(ws, model string) bool {
	return len(model) <= calibrationMaxName && len(ws) <= calibrationMaxWorkspace
}

// scale returns the estimate admission debits for a raw estimate (at
// least 1) of workspace ws on model: ⌈raw × ratio⌉ once the pair has
// enough samples, raw until then.
func (c *calibration) scale(ws, model string, raw int64) int64 {
	if !learned(ws, model) {
		return raw // never learned
	}
	c.mu.Lock()
	m := c.models[calKey{ws, model}]
	if m == nil || m.n < calibrationMinSamples {
		c.mu.Unlock()
		return raw
	}
	c.touch(m)
	act, rw := m.sumAct, m.sumRaw
	c.mu.Unlock()
	return scaleEstimate(raw, act, rw)
}

// scaleEstimate returns ⌈raw × act / rw⌉ with the ratio act/rw bounded to
// [1/4, 4], at least 1, saturating at the int64 maximum. raw ≥ 1; rw ≥ 1;
// 0 ≤ act, and 4 × act and 4 × rw fit in a uint64 (calibrationMaxSample).
func scaleEstimate(raw, act, rw int64) int64 {
	const maxInt = 1<<63 - 1
	r, a, w := uint64(raw), uint64(act), uint64(rw)
	switch {
	case 4*a < w: // the ratio is below 1/4
		q := raw / 4
		if raw%4 != 0 {
			q++
		}
		return q
	case a > 4*w: // above 4
		if raw > maxInt/4 {
			return maxInt
		}
		return 4 * raw
	}
	hi, lo := bits.Mul64(r, a)
	if hi >= w { // the quotient needs more than 64 bits
		return maxInt
	}
	q, rem := bits.Div64(hi, lo, w)
	if rem != 0 {
		q++
	}
	if q > maxInt {
		return maxInt
	}
	return max(1, int64(q))
}

// record adds one reconcile with final usage of workspace ws on model:
// the raw estimate (before scaling) and the charge.
func (c *calibration) record(ws, model string, raw, actual int64) {
	if !learned(ws, model) {
		return
	}
	raw = min(max(raw, 1), calibrationMaxSample)
	actual = min(max(actual, 0), calibrationMaxSample)
	c.mu.Lock()
	defer c.mu.Unlock()
	k := calKey{ws, model}
	m := c.models[k]
	if m == nil {
		if len(c.models) >= calibrationMaxPairs {
			old := c.lru.prev
			c.unlink(old)
			delete(c.models, old.key)
		}
		m = &calModel{key: k}
		c.models[k] = m
	} else {
		c.unlink(m)
	}
	c.pushFront(m)
	if m.n == calibrationWindow {
		m.sumRaw -= m.raw[m.at]
		m.sumAct -= m.actual[m.at]
	} else {
		m.n++
	}
	m.raw[m.at], m.actual[m.at] = raw, actual
	m.sumRaw += raw
	m.sumAct += actual
	m.at = (m.at + 1) % calibrationWindow
}

// ratios returns the bounded ratio per model of the samples of workspace
// *ws, or with ws nil of every workspace together (the ratio of their
// sums), for models with at least calibrationMinSamples of them.
func (c *calibration) ratios(ws *string) map[string]float64 {
	type sums struct {
		n        int
		act, raw big.Int // exact: 4,096 sums of up to 2^61 each
	}
	by := make(map[string]*sums)
	c.mu.Lock()
	for k, m := range c.models {
		if ws != nil && k.ws != *ws {
			continue
		}
		s := by[k.model]
		if s == nil {
			s = &sums{}
			by[k.model] = s
		}
		s.n += m.n
		s.act.Add(&s.act, big.NewInt(m.sumAct))
		s.raw.Add(&s.raw, big.NewInt(m.sumRaw))
	}
	c.mu.Unlock()
	out := make(map[string]float64)
	for model, s := range by {
		if s.n >= calibrationMinSamples {
			r, _ := new(big.Rat).SetFrac(&s.act, &s.raw).Float64()
			out[model] = min(4, max(0.25, r))
		}
	}
	return out
}

// touch makes m the most recently used.
func (c *calibration) touch(m *calModel) {
	if c.lru.next != m {
		c.unlink(m)
		c.pushFront(m)
	}
}

func (c *calibration) unlink(m *calModel) {
	m.prev.next, m.next.prev = m.next, m.prev
	m.prev, m.next = nil, nil
}

func (c *calibration) pushFront(m *calModel) {
	m.prev, m.next = &c.lru, c.lru.next
	c.lru.next.prev = m
	c.lru.next = m
}

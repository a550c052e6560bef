package upstream

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxSkippedModels bounds the per-model skips one key holds: model names
// come from clients' request bodies. Past it the skip that ends soonest is
// forgotten (the key is then tried again for that model, at worst meeting
// one more provider 429).
const maxSkippedModels = 256

// maxSkippedName is the longest model name a skip holds as itself, as the
// llmrate middleware's calibration learns no longer one: names come from
// clients, and a longer one is no model a provider serves. Every longer
// name shares one skip, so a key skipped for one of them is skipped for all
// of them, and for no name of maxSkippedName bytes or less. A key's skips
// so hold at most maxSkippedModels names of at most maxSkippedName bytes.
const maxSkippedName = 256

// skipKey names one per-model skip: a model name of at most maxSkippedName
// bytes, or (long) every longer name.
type skipKey struct {
	name string
	long bool
}

// skipKeyOf is the skip model is held under: model itself, or the long
// names' skip.
func skipKeyOf(model string) skipKey {
	if len(model) > maxSkippedName {
		return skipKey{long: true}
	}
	return skipKey{name: model}
}

// skips is when the provider said a key has room again: for every model,
// and per model (the request's top-level "model"). Times are Unix
// nanoseconds on the Transport's clock; 0 is none.
type skips struct {
	all     atomic.Int64
	nModels atomic.Int32 // len(models), read without the lock
	mu      sync.Mutex
	models  map[skipKey]int64
}

// wait returns how long from now the key is skipped for the request's
// model (0: not skipped). model is called only when some model is skipped.
func (s *skips) wait(now time.Time, model func() string) time.Duration {
	n := now.UnixNano()
	until := s.all.Load()
	if s.nModels.Load() > 0 {
		if m := model(); m != "" {
			k := skipKeyOf(m)
			s.mu.Lock()
			if u, ok := s.models[k]; ok && u <= n {
				delete(s.models, k) // ended: forget it, so a key without skips parses no model
				s.nModels.Store(int32(len(s.models)))
			} else {
				until = max(until, u)
			}
			s.mu.Unlock()
		}
	}
	if until <= n {
		return 0
	}
	return time.Duration(until - n)
}

// skip skips the key for model ("" for every model) until now + d, or
// later if it already was.
func (s *skips) skip(now time.Time, d time.Duration, model string) {
	until := now.Add(d).UnixNano()
	if model == "" {
		for {
			old := s.all.Load()
			if old >= until || s.all.CompareAndSwap(old, until) {
				return
			}
		}
	}
	k := skipKeyOf(model)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.models == nil {
		s.models = make(map[skipKey]int64)
	}
	if old, ok := s.models[k]; ok {
		s.models[k] = max(old, until)
		return
	}
	if len(s.models) >= maxSkippedModels {
		s.prune(now.UnixNano())
	}
	k.name = strings.Clone(k.name) // held: nothing of the request it came from
	s.models[k] = until
	s.nModels.Store(int32(len(s.models)))
}

// prune drops the skips that have ended and, if the map is still full, the
// one that ends soonest.
func (s *skips) prune(now int64) {
	var soonest skipKey
	at := int64(0)
	for m, until := range s.models {
		switch {
		case until <= now:
			delete(s.models, m)
		case at == 0 || until < at:
			soonest, at = m, until
		}
	}
	if len(s.models) >= maxSkippedModels {
		delete(s.models, soonest)
	}
}

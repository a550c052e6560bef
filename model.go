package llmrate

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/llmrate/llmrate/request"
)

// ModelLimits maps a model name to its own figures per tier. A name ending
// in "*" is a prefix entry: it matches every model whose name starts with
// what comes before the "*" ("gpt-4o*" matches "gpt-4o" and
// "gpt-4o-2024-08-06"). An exact entry wins over any prefix entry, and the
// longest matching prefix wins over shorter ones.
//
// A request whose model has an entry spends that entry's own four buckets
// (the key's within its workspace and the workspace's, as for the default
// buckets: same order, all or nothing, same rollback), at the entry's
// figures for the workspace's tier; every model one prefix entry matches
// shares that entry's buckets. A request whose model has no entry, or that
// names no model, spends the default buckets at the tier table's figures.
type ModelLimits map[string]TierTable

// WithModel sets where a request's model name comes from, e.g.
// ModelFromBody(), for WithModelLimits, WithTokenCost and WithCalibration
// (without any of them it is never called). Default: none (every request spends the default buckets). An
// empty name means the request names no model. An error from e refuses the
// request with 400 (code "invalid_model"), as bad client input; an
// extractor for which "no model" is not an error returns "", nil. A panic
// in e fails the request open. nil is an error.
func WithModel(e Extractor) Option {
	return optionFunc(func(c *config) {
		if e == nil {
			c.fail("WithModel", errNil)
		}
		c.model = e
	})
}

// WithModelLimits sets per-model figures (see ModelLimits). It needs
// WithModel, which says where the model name comes from. Every name
// must be non-empty, with "*" at most once and only last; every figure in
// [1, MaxPerMinute]. Default: none.
//
// The store must keep each entry's buckets apart: the memory store and the
// Redis store do (see Store for a third-party store).
func WithModelLimits(m ModelLimits) Option {
	return optionFunc(func(c *config) {
		c.modelLimits = make(ModelLimits, len(m))
		for k, v := range m {
			c.modelLimits[k] = v
		}
	})
}

// modelTable is ModelLimits compiled for lookup: exact names in a map,
// prefix entries longest first.
type modelTable struct {
	exact    map[string]TierTable
	prefixes []modelPrefix
}

type modelPrefix struct {
	prefix string // without the "*"
	name   string // as configured, with the "*"
	table  TierTable
}

// compileModels validates m and compiles it. An empty m compiles to nil.
func compileModels(m ModelLimits) (*modelTable, error) {
	if len(m) == 0 {
		return nil, nil
	}
	t := &modelTable{exact: map[string]TierTable{}}
	var errs []error
	for _, name := range sortedNames(m) {
		tt := m[name]
		star := strings.IndexByte(name, '*')
		switch {
		case name == "":
			errs = append(errs, errors.New("empty model name"))
			continue
		case star >= 0 && star != len(name)-1:
			errs = append(errs, fmt.Errorf("model %q: '*' may only end a name", name))
			continue
		}
		if err := tt.validate(); err != nil {
			errs = append(errs, fmt.Errorf("model %q: %w", name, err))
			continue
		}
		if star < 0 {
			t.exact[name] = tt
		} else {
			t.prefixes = append(t.prefixes, modelPrefix{prefix: name[:star], name: name, table: tt})
		}
	}
	// Longest first, so the first match is the longest.
	slices.SortStableFunc(t.prefixes, func(a, b modelPrefix) int { return cmp.Compare(len(b.prefix), len(a.prefix)) })
	return t, errors.Join(errs...)
}

func sortedNames(m ModelLimits) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// match returns the entry model falls under: its name as configured and its
// figures. ok is false when model is "" or no entry matches.
func (t *modelTable) match(model string) (name string, tt TierTable, ok bool) {
	if t == nil || model == "" {
		return "", TierTable{}, false
	}
	if tt, ok := t.exact[model]; ok {
		return model, tt, true
	}
	for _, p := range t.prefixes {
		if strings.HasPrefix(model, p.prefix) {
			return p.name, p.table, true
		}
	}
	return "", TierTable{}, false
}

// identifyModel reads the request's model when WithModel is set and model
// limits (a plan's Models), a token cost or calibration use it. A non-zero
// status refuses the request as bad client input; fault is set when the
// extractor panicked (the request then fails open).
func (l *Limiter) identifyModel(r *http.Request, a *admission) (status int, code, msg string, fault error) {
	if l.cfg.model == nil || l.models == nil && l.cfg.plans == nil && l.cfg.cost == nil && l.calib == nil {
		return 0, "", "", nil
	}
	defer func() {
		if p := recover(); p != nil {
			status, fault = 0, &PanicError{Where: "model extractor", Value: p}
		}
	}()
	if l.primeBody {
		request.Prepare(r) // one scan for the model and the estimate
	}
	m, err := l.cfg.model(r)
	if errors.Is(err, ErrAmbiguousModel) {
		return http.StatusBadRequest, "invalid_model", "The request names its model more than once, with different values.", nil
	}
	if err != nil {
		return http.StatusBadRequest, "invalid_model", "The request's model could not be read.", nil
	}
	a.model = m
	return 0, "", "", nil
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/llmrate/llmrate"
)

// Figures are one row of limits in the config file, with its optional
// gauge and windows (llmrate.Limits.Windows), written as the limits
// endpoint shows them: "windows": [{"seconds": 86400, "requests": 1500}],
// a calendar quota [{"calendar": "month", "zone": "Europe/Berlin",
// "tokens": 10000000}], a session [{"seconds": 18000, "session": true,
// "requests": 200}]. A per-minute figure may be "unlimited".
type Figures struct {
	RequestsPerMin     Figure          `json:"requestsPerMin"`
	TokensPerMin       Figure          `json:"tokensPerMin"`
	ConcurrentRequests int64           `json:"concurrentRequests"`
	Windows            []WindowFigures `json:"windows"`
}

// Figure is a per-minute figure: a number, or "unlimited"
// (llmrate.Unlimited).
type Figure int64

// UnmarshalJSON reads a number or "unlimited".
func (f *Figure) UnmarshalJSON(b []byte) error {
	if string(b) == `"unlimited"` {
		*f = Figure(llmrate.Unlimited)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("a per-minute figure is a number or \"unlimited\", not %s", b)
	}
	*f = Figure(n)
	return nil
}

// WindowFigures is one window: its length in seconds (or its calendar and
// zone) and the most per window of each meter (0 or absent: not limited).
type WindowFigures struct {
	Seconds      int64  `json:"seconds"`
	Calendar     string `json:"calendar"` // "day", "week" or "month", with "zone"
	Zone         string `json:"zone"`     // an IANA zone name, e.g. "Europe/Berlin", or "UTC"
	Session      bool   `json:"session"`
	Requests     int64  `json:"requests"`
	Tokens       int64  `json:"tokens"`
	InputTokens  int64  `json:"inputTokens"`
	OutputTokens int64  `json:"outputTokens"`
}

func windows(ws []WindowFigures) ([]llmrate.Window, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	out := make([]llmrate.Window, len(ws))
	for i, w := range ws {
		out[i] = llmrate.Window{Per: time.Duration(w.Seconds) * time.Second, Session: w.Session, Requests: w.Requests, Tokens: w.Tokens,
			InputTokens: w.InputTokens, OutputTokens: w.OutputTokens}
		if w.Calendar != "" {
			c, ok := map[string]llmrate.Calendar{"day": llmrate.CalendarDay, "week": llmrate.CalendarWeek, "month": llmrate.CalendarMonth}[w.Calendar]
			if !ok {
				return nil, fmt.Errorf("window %d: calendar %q: want day, week or month", i, w.Calendar)
			}
			out[i].Calendar = c
		}
		if w.Zone != "" {
			z, err := time.LoadLocation(w.Zone)
			if err != nil {
				return nil, fmt.Errorf("window %d: %w", i, err)
			}
			out[i].Zone = z
		}
	}
	return out, nil
}

func (f Figures) limits() (llmrate.Limits, error) {
	ws, err := windows(f.Windows)
	return llmrate.Limits{RequestsPerMinute: int64(f.RequestsPerMin), TokensPerMinute: int64(f.TokensPerMin),
		ConcurrentRequests: f.ConcurrentRequests, Windows: ws}, err
}

// PlanFigures is one of the config's "plans": the plan's figures, and its
// model entries' ("models"), each added to the plan's windows and gauge.
type PlanFigures struct {
	Figures
	Models map[string]Figures `json:"models"`
}

// planOptions turns the config's plans into WithPlans: each workspace of
// "workspaces" names its plan, and every other gets "defaultPlan".
func planOptions(path string, c *Config) ([]llmrate.Option, error) {
	plans := make(map[string]llmrate.Plan, len(c.Plans))
	for name, pf := range c.Plans {
		lim, err := pf.limits()
		if err != nil {
			return nil, fmt.Errorf("%s: plan %q: %w", path, name, err)
		}
		p := llmrate.Plan{Name: name, Limits: lim}
		for model, f := range pf.Models {
			if p.Models == nil {
				p.Models = map[string]llmrate.Limits{}
			}
			if p.Models[model], err = f.limits(); err != nil {
				return nil, fmt.Errorf("%s: plan %q: model %q: %w", path, name, model, err)
			}
		}
		plans[name] = p
	}
	byWorkspace := make(map[string]llmrate.Plan, len(c.Workspaces))
	for ws, name := range c.Workspaces {
		p, ok := plans[name]
		if !ok {
			return nil, fmt.Errorf("%s: workspace %q: no plan %q in \"plans\"", path, ws, name)
		}
		byWorkspace[ws] = p
	}
	otherwise, ok := plans[c.DefaultPlan]
	if !ok {
		return nil, fmt.Errorf("%s: \"defaultPlan\" %q: not one of \"plans\"", path, c.DefaultPlan)
	}
	// Read-only after start: safe for concurrent use.
	resolver := llmrate.PlanResolverFunc(func(_ context.Context, ws string) (llmrate.Plan, bool) {
		p, ok := byWorkspace[ws]
		return p, ok
	})
	return []llmrate.Option{llmrate.WithPlans(resolver, otherwise), llmrate.WithModel(llmrate.ModelFromBody())}, nil
}

// policyOptions turns the config's models, overrides and shadow switch
// into limiter options. A model entry lists figures by tier name; "default"
// covers the tiers it does not list, and every tier must be covered.
func policyOptions(path string, c *Config) ([]llmrate.Option, error) {
	var opts []llmrate.Option
	if len(c.Plans) > 0 {
		if len(c.Models) > 0 || len(c.Overrides) > 0 {
			return nil, fmt.Errorf("%s: \"plans\" say what a workspace gets: no \"models\" or \"overrides\" beside them (a plan's own \"models\" hold its entries)", path)
		}
		p, err := planOptions(path, c)
		if err != nil {
			return nil, err
		}
		opts = append(opts, p...)
	}
	if len(c.Models) > 0 {
		m := llmrate.ModelLimits{}
		for name, rows := range c.Models {
			tt, err := tierTable(rows)
			if err != nil {
				return nil, fmt.Errorf("%s: model %q: %w", path, name, err)
			}
			m[name] = tt
		}
		opts = append(opts, llmrate.WithModel(llmrate.ModelFromBody()), llmrate.WithModelLimits(m))
	}
	if len(c.Overrides) > 0 {
		over := make(map[string]llmrate.Limits, len(c.Overrides))
		for ws, f := range c.Overrides {
			l, err := f.limits()
			if err != nil {
				return nil, fmt.Errorf("%s: override %q: %w", path, ws, err)
			}
			over[ws] = l
		}
		// Read-only after start: safe for concurrent use. An invalid figure
		// here fails its workspace's requests open (and logs each one).
		opts = append(opts, llmrate.WithOverrides(llmrate.OverrideResolverFunc(func(_ context.Context, ws string) (llmrate.Limits, bool) {
			l, ok := over[ws]
			return l, ok
		})))
	}
	if c.Shadow {
		opts = append(opts, llmrate.WithShadow())
	}
	return opts, nil
}

func tierTable(rows map[string]Figures) (llmrate.TierTable, error) {
	var tt llmrate.TierTable
	for name := range rows {
		if name == "default" {
			continue
		}
		if _, err := llmrate.ParseTier(name); err != nil {
			return tt, err
		}
	}
	for _, p := range []struct {
		t   llmrate.Tier
		dst *llmrate.Limits
	}{{llmrate.Free, &tt.Free}, {llmrate.Developer, &tt.Developer}, {llmrate.Team, &tt.Team}, {llmrate.Growth, &tt.Growth}, {llmrate.Scale, &tt.Scale}, {llmrate.Enterprise, &tt.Enterprise}} {
		f, ok := rows[p.t.String()]
		if !ok {
			if f, ok = rows["default"]; !ok {
				return tt, fmt.Errorf("no figures for the %s tier (and no \"default\")", p.t)
			}
		}
		l, err := f.limits()
		if err != nil {
			return tt, err
		}
		*p.dst = l
	}
	return tt, nil
}

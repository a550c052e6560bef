package main

import (
	"context"
	"fmt"
	"time"

	"github.com/llmrate/llmrate"
)

// Figures are one row of limits in the config file, with its optional
// windows (llmrate.Limits.Windows), written as the limits endpoint shows
// them: "windows": [{"seconds": 86400, "requests": 1500}].
type Figures struct {
	RequestsPerMin int64           `json:"requestsPerMin"`
	TokensPerMin   int64           `json:"tokensPerMin"`
	Windows        []WindowFigures `json:"windows"`
}

// WindowFigures is one window: its length in seconds and the most per
// window of each meter (0 or absent: not limited).
type WindowFigures struct {
	Seconds      int64 `json:"seconds"`
	Requests     int64 `json:"requests"`
	Tokens       int64 `json:"tokens"`
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
}

func windows(ws []WindowFigures) []llmrate.Window {
	if len(ws) == 0 {
		return nil
	}
	out := make([]llmrate.Window, len(ws))
	for i, w := range ws {
		out[i] = llmrate.Window{Per: time.Duration(w.Seconds) * time.Second, Requests: w.Requests, Tokens: w.Tokens,
			InputTokens: w.InputTokens, OutputTokens: w.OutputTokens}
	}
	return out
}

func (f Figures) limits() llmrate.Limits {
	return llmrate.Limits{RequestsPerMinute: f.RequestsPerMin, TokensPerMinute: f.TokensPerMin, Windows: windows(f.Windows)}
}

// policyOptions turns the config's models, overrides and shadow switch
// into limiter options. A model entry lists figures by tier name; "default"
// covers the tiers it does not list, and every tier must be covered.
func policyOptions(path string, c *Config) ([]llmrate.Option, error) {
	var opts []llmrate.Option
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
			over[ws] = f.limits()
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
		*p.dst = f.limits()
	}
	return tt, nil
}

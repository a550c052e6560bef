package llmrate

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// EnterpriseNote is what the limits endpoint says instead of Enterprise's
// figures, which are contract terms and never published.
const EnterpriseNote = "Limits on this plan are set in your agreement."

type limitsBody struct {
	Tier           string              `json:"tier,omitempty"`
	Plan           string              `json:"plan,omitempty"`
	RequestsPerMin figure              `json:"requestsPerMin"`
	TokensPerMin   figure              `json:"tokensPerMin"`
	Concurrent     int64               `json:"concurrentRequests,omitempty"`
	Windows        []windowRow         `json:"windows,omitempty"`
	Note           string              `json:"note,omitempty"`
	Models         map[string]limitRow `json:"models,omitempty"`
	Docs           string              `json:"docs,omitempty"`
	Remaining      []remainingRow      `json:"remaining,omitempty"`
}

// limitRow is one model entry's figures; both null on Enterprise.
type limitRow struct {
	RequestsPerMin figure      `json:"requestsPerMin"`
	TokensPerMin   figure      `json:"tokensPerMin"`
	Concurrent     int64       `json:"concurrentRequests,omitempty"`
	Windows        []windowRow `json:"windows,omitempty"`
}

// figure is a per-minute figure as the endpoint shows it: a number, the
// string "unlimited" for Unlimited, or null where it is not published
// (Enterprise).
type figure struct {
	v   int64
	set bool
}

func shown(v int64) figure { return figure{v: v, set: true} }

// MarshalJSON writes the figure: a number, "unlimited" or null.
func (f figure) MarshalJSON() ([]byte, error) {
	switch {
	case !f.set:
		return []byte("null"), nil
	case f.v == Unlimited:
		return []byte(`"unlimited"`), nil
	}
	return strconv.AppendInt(nil, f.v, 10), nil
}

// windowRow is one window's figures (Limits.Windows): its non-zero meters,
// and for a calendar window its calendar, zone and the next period's start.
type windowRow struct {
	Seconds      float64 `json:"seconds,omitempty"`
	Calendar     string  `json:"calendar,omitempty"`
	Zone         string  `json:"zone,omitempty"`
	ResetsAt     string  `json:"resetsAt,omitempty"`
	Session      bool    `json:"session,omitempty"`
	Requests     int64   `json:"requests,omitempty"`
	Tokens       int64   `json:"tokens,omitempty"`
	InputTokens  int64   `json:"inputTokens,omitempty"`
	OutputTokens int64   `json:"outputTokens,omitempty"`
}

// windowRows lists ws for the endpoint at now; nil when there are none.
func windowRows(ws []Window, now time.Time) []windowRow {
	if len(ws) == 0 {
		return nil
	}
	rows := make([]windowRow, len(ws))
	for i, w := range ws {
		rows[i] = windowRow{Seconds: w.Per.Seconds(), Session: w.Session, Requests: w.Requests, Tokens: w.Tokens, InputTokens: w.InputTokens, OutputTokens: w.OutputTokens}
		if w.Calendar != NoCalendar {
			_, end := periodOf(w, now)
			rows[i].Calendar, rows[i].Zone, rows[i].ResetsAt = w.Calendar.String(), zoneName(w.Zone), end.In(w.Zone).Format(time.RFC3339)
		}
	}
	return rows
}

// LimitsHandler returns the limits endpoint (mount it at e.g.
// GET /platform/v1/limits). It answers GET and HEAD with the caller's own
// workspace row, the caller identified by the same extractors as the
// middleware (none: 401); any other method gets 405, checked first.
// Enterprise answers null figures and EnterpriseNote, never a guess. A
// workspace with an override (WithOverrides) gets the override's figures,
// whatever its tier. With WithModelLimits the answer adds "models": each
// entry's figures for the caller's tier, by entry name as configured (null
// on Enterprise). A concurrency cap (Limits.ConcurrentRequests) adds
// "concurrentRequests" to the workspace's row and to each model's when it
// is set (> 0) and the figures are published (not on Enterprise without an
// override). Windows (Limits.Windows) add "windows" to each row that has
// them, e.g. [{"seconds":86400,"requests":1500}], listing only the
// non-zero meters ("requests", "tokens", "inputTokens", "outputTokens");
// absent where there are none and where the figures are null. A calendar
// window's row has no "seconds" but "calendar" ("day", "week", "month"),
// "zone" (the location's name) and "resetsAt" (the next period's start,
// RFC 3339 in the zone's offset); a session window's adds "session":true,
// and with ShowRemaining "resetsAt" (the open session's end) while one is
// open.
//
// Under WithPlans the row is the caller's plan's: "plan" (its name) in
// place of "tier", its figures, gauge, windows and "models". A per-minute
// figure is a number, "unlimited" for Unlimited, or null where it is not
// published (Enterprise).
//
// With ShowRemaining, and a store that is a Peeker (the memory store and
// the Redis store are), the answer adds "remaining": what is left now of
// each of the caller's default buckets and windows (its plan's, tier's or
// override's figures; a model entry's own buckets are not listed), read in
// one store call that debits nothing (see ShowRemaining). HEAD is answered as GET without the
// body: a client may check the endpoint cheaply.
//
// An invalid override or plan, or a panicking tier, override or plan
// resolver, is a fault: 500, counted in FailOpens, logged and reported to
// the observer (FailedOpen, Op "limits"), never a guess.
func (l *Limiter) LimitsHandler(opts ...LimitsOption) http.Handler {
	var lc limitsConfig
	for _, o := range opts {
		if o != nil {
			o.applyLimits(&lc)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, r, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "Only GET is allowed on this endpoint.")
			return
		}
		var a admission
		status, code, msg, fault := l.identify(r, &a)
		if fault != nil {
			l.failOpen(&a, "limits", fault)
			writeError(w, r, http.StatusInternalServerError, "server_error", "internal_error", "The limits could not be read.")
			return
		}
		if status != 0 {
			writeError(w, r, status, "invalid_request_error", code, msg)
			return
		}
		body, err := l.limitsRow(r, &a)
		if err == nil && lc.remaining && body.Note == "" {
			body.Remaining, err = l.remaining(r, &a, body.Windows)
		}
		if err != nil {
			l.failOpen(&a, "limits", err)
			writeError(w, r, http.StatusInternalServerError, "server_error", "internal_error", "The limits could not be read.")
			return
		}
		b, _ := json.Marshal(body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(b)
	})
}

// resolveTier resolves a workspace's tier as admission does (unknown or
// out of range: Free, the tier it is admitted at). A panicking resolver is
// a fault (a *PanicError): the endpoint cannot know the tier and must not
// guess one.
func (l *Limiter) resolveTier(r *http.Request, ws string) (t Tier, err error) {
	defer func() {
		if p := recover(); p != nil {
			t, err = Free, &PanicError{Where: "tier resolver", Value: p}
		}
	}()
	return knownTier(l.cfg.resolver.ResolveTier(r.Context(), ws)), nil
}

// safeOverride is override for the limits endpoint: a panicking resolver
// is a fault (a *PanicError), as is an invalid override.
func (l *Limiter) safeOverride(r *http.Request, ws string) (o Limits, ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			o, ok, err = Limits{}, false, &PanicError{Where: "override resolver", Value: p}
		}
	}()
	return l.override(r.Context(), ws)
}

// limitsRow is the caller's row: its plan's, or its tier's or override's.
func (l *Limiter) limitsRow(r *http.Request, a *admission) (limitsBody, error) {
	now := l.cfg.clock()
	if l.cfg.plans != nil {
		cp, err := l.resolvePlan(r.Context(), a.ws)
		if err != nil {
			return limitsBody{}, err
		}
		a.plan = cp.name
		lim := cp.ws
		return limitsBody{Plan: cp.name, Docs: l.cfg.docsURL, Models: modelRows(cp.models, Free, now),
			RequestsPerMin: shown(lim.RequestsPerMinute), TokensPerMin: shown(lim.TokensPerMinute), Concurrent: lim.ConcurrentRequests,
			Windows: windowRows(lim.Windows, now)}, nil
	}
	tier, err := l.resolveTier(r, a.ws)
	a.tier, a.plan = tier, tier.String()
	var o Limits
	var overridden bool
	if err == nil {
		o, overridden, err = l.safeOverride(r, a.ws)
	}
	if err != nil {
		return limitsBody{}, err
	}
	body := limitsBody{Tier: tier.String(), Docs: l.cfg.docsURL, Models: modelRows(l.models, tier, now)}
	switch {
	case overridden:
		body.RequestsPerMin, body.TokensPerMin, body.Concurrent = shown(o.RequestsPerMinute), shown(o.TokensPerMinute), o.ConcurrentRequests
		body.Windows = windowRows(o.Windows, now)
	case tier == Enterprise:
		body.Note = EnterpriseNote
	default:
		lim := l.cfg.tiers.For(tier)
		body.RequestsPerMin, body.TokensPerMin, body.Concurrent = shown(lim.RequestsPerMinute), shown(lim.TokensPerMinute), lim.ConcurrentRequests
		body.Windows = windowRows(lim.Windows, now)
	}
	return body, nil
}

// modelRows lists every model entry's figures of t for tier (nil without
// model limits); Enterprise's are null.
func modelRows(t *modelTable, tier Tier, now time.Time) map[string]limitRow {
	if t == nil {
		return nil
	}
	rows := make(map[string]limitRow, len(t.exact)+len(t.prefixes))
	add := func(name string, tt TierTable) {
		if tier == Enterprise {
			rows[name] = limitRow{}
			return
		}
		lim := tt.For(tier)
		rows[name] = limitRow{RequestsPerMin: shown(lim.RequestsPerMinute), TokensPerMin: shown(lim.TokensPerMinute), Concurrent: lim.ConcurrentRequests,
			Windows: windowRows(lim.Windows, now)}
	}
	for name, tt := range t.exact {
		add(name, tt)
	}
	for _, p := range t.prefixes {
		add(p.name, p.table)
	}
	return rows
}

// LimitsOption configures LimitsHandler.
type LimitsOption interface{ applyLimits(*limitsConfig) }

type limitsConfig struct{ remaining bool }

type limitsOptionFunc func(*limitsConfig)

func (f limitsOptionFunc) applyLimits(c *limitsConfig) { f(c) }

// ShowRemaining makes the limits endpoint add "remaining": for the
// caller's key and workspace (one set when the key is its own workspace),
// each per-minute bucket and each window meter of the default buckets
// (its plan's or tier's figures; not the model entries'), one object each:
//
//	{"scope":"key","meter":"tokens","window":"minute","remaining":198000,"fullAt":"2026-12-07T10:00:03Z"}
//	{"scope":"workspace","meter":"tokens","calendar":"month","zone":"Europe/Berlin","remaining":9000000,"fullAt":"2026-12-01T00:00:00+01:00"}
//
// "meter" is requests, tokens, input_tokens or output_tokens; "window" the
// window's name ("minute", "day", "6h0m0s"), with "session":true for a
// session window, or "calendar" and "zone" for a calendar window;
// "remaining" the whole level now (negative while in debt); "fullAt" when
// it is full again (absent when full now; a calendar window's is its
// period's end, a session's its end). It costs one store read that debits
// nothing, takes no slot and opens no session; a store that is not a
// Peeker answers without "remaining". Not on Enterprise without an
// override (its figures are not published). A store error is a fault
// (500), as for the other faults of the endpoint.
func ShowRemaining() LimitsOption {
	return limitsOptionFunc(func(c *limitsConfig) { c.remaining = true })
}

// remainingRow is one bucket's level in the limits endpoint (ShowRemaining).
type remainingRow struct {
	Scope     string `json:"scope"`
	Meter     string `json:"meter"`
	Window    string `json:"window,omitempty"`
	Calendar  string `json:"calendar,omitempty"`
	Zone      string `json:"zone,omitempty"`
	Session   bool   `json:"session,omitempty"`
	Remaining int64  `json:"remaining"`
	FullAt    string `json:"fullAt,omitempty"`
}

// remaining reads the caller's levels from a Peeker (nil rows without one).
// The workspace's session windows among rows (the row's windows, as the
// workspace's figures list them) gain "resetsAt" while a session is open.
func (l *Limiter) remaining(r *http.Request, a *admission, windows []windowRow) ([]remainingRow, error) {
	p, ok := l.cfg.store.(Peeker)
	if !ok {
		return nil, nil
	}
	if err := l.figures(r.Context(), a); err != nil {
		return nil, err
	}
	now := l.cfg.clock()
	req := AdmitRequest{Key: a.key, Workspace: a.ws, KeyLimits: a.kl, WorkspaceLimits: a.wl, Tokens: 1, Solo: a.solo, Now: now}
	ctx, cancel := context.WithTimeout(r.Context(), l.cfg.timeout)
	defer cancel()
	d, err := p.Peek(ctx, req)
	if err != nil {
		return nil, &StoreError{Op: "peek", Err: err}
	}
	for i, w := range a.wl.Windows {
		if w.Session && i < len(windows) && i < len(d.WorkspaceWindows) && d.WorkspaceWindows[i].Reset != 0 {
			windows[i].ResetsAt = d.WorkspaceWindows[i].ResetAt().Format(time.RFC3339)
		}
	}
	var rows []remainingRow
	meters := [4]string{"requests", "tokens", "input_tokens", "output_tokens"}
	for scope, lim := range [2]Limits{a.kl, a.wl} {
		if scope == 1 && a.solo {
			break // one set: the key's
		}
		name := [2]string{"key", "workspace"}[scope]
		meterSet := WindowMeters()[scope]
		for m, b := range meterSet[:2] {
			rate := b.PerMinute(a.kl, a.wl)
			if rate == Unlimited {
				continue
			}
			row := remainingRow{Scope: name, Meter: meters[m], Window: "minute", Remaining: d.Remaining[b]}
			if t := timeToFull(d.Remaining[b], rate); t > 0 {
				row.FullAt = now.Add(t).UTC().Format(time.RFC3339)
			}
			rows = append(rows, row)
		}
		levels := d.KeyWindows
		if scope == 1 || a.solo {
			levels = d.WorkspaceWindows
		}
		if a.solo && len(levels) == 0 {
			levels = d.KeyWindows
		}
		for i, w := range lim.Windows {
			for m, b := range WindowMeters()[scope] {
				q := w.Figure(b)
				if q == 0 {
					continue
				}
				lv := WindowLevels{}
				if i < len(levels) {
					lv = levels[i]
				}
				rows = append(rows, windowRemaining(name, meters[m], w, lv.Level(b), q, lv.ResetAt(), now))
			}
		}
	}
	return rows, nil
}

// windowRemaining is one window meter's remainingRow.
func windowRemaining(scope, meter string, w Window, level, q int64, reset, now time.Time) remainingRow {
	row := remainingRow{Scope: scope, Meter: meter, Session: w.Session, Remaining: level}
	var full time.Time
	switch {
	case w.Calendar != NoCalendar:
		row.Calendar, row.Zone = w.Calendar.String(), zoneName(w.Zone)
		if level < q {
			full = reset
			if full.IsZero() {
				_, full = periodOf(w, now)
			}
			full = full.In(w.Zone)
		}
	case w.Session:
		row.Window = windowName(w.Per)
		if level < q {
			full = reset
		}
	default:
		row.Window = windowName(w.Per)
		if t := windowToFull(level, q, w.Per); t > 0 {
			full = now.Add(t).UTC()
		}
	}
	if !full.IsZero() {
		row.FullAt = full.Format(time.RFC3339)
	}
	return row
}

package llmrate

import (
	"time"
)

// Figure returns w's figure for the meter that bucket b names (of either
// scope): Requests for KeyRequests and WorkspaceRequests, Tokens for
// KeyTokens and WorkspaceTokens, InputTokens for KeyInputTokens and
// WorkspaceInputTokens, OutputTokens for KeyOutputTokens and
// WorkspaceOutputTokens; 0 for a gauge. A store keeps a bucket for each
// non-zero figure: its capacity is the figure, and it refills the figure
// per w.Per.
func (w Window) Figure(b Bucket) int64 {
	switch b {
	case KeyRequests, WorkspaceRequests:
		return w.Requests
	case KeyTokens, WorkspaceTokens:
		return w.Tokens
	case KeyInputTokens, WorkspaceInputTokens:
		return w.InputTokens
	case KeyOutputTokens, WorkspaceOutputTokens:
		return w.OutputTokens
	}
	return 0
}

// WindowMeters lists, for each scope, a window's meters in the order they
// are checked (requests, tokens, input, output): WindowMeters()[0] the
// key's, WindowMeters()[1] the workspace's. (A function, so that no caller
// can change the order the stores rely on.)
func WindowMeters() [2][4]Bucket {
	return [2][4]Bucket{
		{KeyRequests, KeyTokens, KeyInputTokens, KeyOutputTokens},
		{WorkspaceRequests, WorkspaceTokens, WorkspaceInputTokens, WorkspaceOutputTokens},
	}
}

// WindowLevels is one window's whole-unit levels after a decision, one per
// meter (0 for a meter the window does not limit). A level may be negative
// while its bucket is in debt.
type WindowLevels struct {
	Requests, Tokens, InputTokens, OutputTokens int64
	// Reset is, for a calendar window, the end of the period in force (the
	// next period's start) and, for a session window, the end of the
	// session open now (0 when none is open), as an instant in Unix
	// nanoseconds (ResetAt: as a time.Time); 0 for a rolling window (a
	// QuotaStore sets it). An integer, not a time.Time, so that levels hold
	// no pointer: every windowed decision allocates them.
	Reset int64
}

// ResetAt returns Reset as an instant (UTC); the zero Time when Reset is 0.
func (l WindowLevels) ResetAt() time.Time {
	if l.Reset == 0 {
		return time.Time{}
	}
	return time.Unix(0, l.Reset).UTC()
}

// Level returns the level of the meter bucket b names (of either scope).
func (l WindowLevels) Level(b Bucket) int64 {
	switch b {
	case KeyRequests, WorkspaceRequests:
		return l.Requests
	case KeyTokens, WorkspaceTokens:
		return l.Tokens
	case KeyInputTokens, WorkspaceInputTokens:
		return l.InputTokens
	case KeyOutputTokens, WorkspaceOutputTokens:
		return l.OutputTokens
	}
	return 0
}

// set sets the level of the meter bucket b names.
func (l *WindowLevels) set(b Bucket, v int64) {
	switch b {
	case KeyRequests, WorkspaceRequests:
		l.Requests = v
	case KeyTokens, WorkspaceTokens:
		l.Tokens = v
	case KeyInputTokens, WorkspaceInputTokens:
		l.InputTokens = v
	case KeyOutputTokens, WorkspaceOutputTokens:
		l.OutputTokens = v
	}
}

// combineWindows combines two Limits' windows where both hold (a key tier
// under an override): windows pair by identity (Per, Calendar, Zone's
// name, Session) and each meter takes the tighter
// non-zero figure; a window, or a meter, set on one side only is kept as
// it is. The result lists a's windows in a's order, then those of b with an
// identity a lacks, in b's order (at most 2×MaxWindows). nil when both are
// empty.
func combineWindows(a, b []Window) []Window {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return b
	}
	out := make([]Window, 0, len(a)+len(b))
	for _, w := range a {
		for _, v := range b {
			if sameWindow(v, w) {
				w = Window{Per: w.Per, Calendar: w.Calendar, Zone: w.Zone, Session: w.Session, Requests: tighterCap(w.Requests, v.Requests), Tokens: tighterCap(w.Tokens, v.Tokens),
					InputTokens: tighterCap(w.InputTokens, v.InputTokens), OutputTokens: tighterCap(w.OutputTokens, v.OutputTokens)}
				break
			}
		}
		out = append(out, w)
	}
outer:
	for _, v := range b {
		for _, w := range a {
			if sameWindow(w, v) {
				continue outer
			}
		}
		out = append(out, v)
	}
	return out
}

// Equal reports whether a and b are the same figures, windows included (in
// the same order). Limits holds a slice (Windows), so == does not compile
// on it.
func (a Limits) Equal(b Limits) bool {
	if a.RequestsPerMinute != b.RequestsPerMinute || a.TokensPerMinute != b.TokensPerMinute ||
		a.ConcurrentRequests != b.ConcurrentRequests || len(a.Windows) != len(b.Windows) {
		return false
	}
	for i, w := range a.Windows {
		v := b.Windows[i]
		if !sameWindow(w, v) || w.Requests != v.Requests || w.Tokens != v.Tokens || w.InputTokens != v.InputTokens || w.OutputTokens != v.OutputTokens {
			return false
		}
	}
	return true
}

// String names the window as the 429 messages do after "per": "minute",
// "day", "6h0m0s", "calendar month (Europe/Berlin)", "5h0m0s session".
func (w Window) String() string { return windowPhrase(w) }

// windowName names a window for a message: "second", "minute", "hour",
// "day", else its Go duration ("6h0m0s").
func windowName(per time.Duration) string {
	switch per {
	case time.Second:
		return "second"
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	case 24 * time.Hour:
		return "day"
	}
	return per.String()
}

// smallestTokensCapacity is the smallest capacity among the buckets a
// request's token estimate is debited from: the per-minute tokens buckets
// (2× their figures; none when Unlimited) and the windows' Tokens meters
// (their figures), the windows lent by a plan to an entry's request (lent)
// included. With no tokens bucket at all: 2 × MaxPerMinute.
func smallestTokensCapacity(kl, wl Limits, lent ...Limits) int64 {
	c := int64(2 * MaxPerMinute)
	for _, f := range [2]int64{kl.TokensPerMinute, wl.TokensPerMinute} {
		if f != Unlimited {
			c = min(c, 2*f)
		}
	}
	for _, l := range append([]Limits{kl, wl}, lent...) {
		for _, w := range l.Windows {
			if w.Tokens > 0 {
				c = min(c, w.Tokens)
			}
		}
	}
	return c
}

// Validate reports whether l is valid wherever New accepts Limits: each
// per-minute figure in [1, MaxPerMinute] or Unlimited, ConcurrentRequests not negative,
// and the windows as Limits.Windows says. nil when valid.
func (l Limits) Validate() error { return l.validate() }

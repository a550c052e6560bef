package llmrate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Tier is a plan's rate-limit row. The zero value is Free.
type Tier int

// The tiers, in ladder order. Adding a constant here without adding a field
// of the same name to TierTable fails to compile (see tierCount below).
const (
	Free Tier = iota
	Developer
	Team
	Growth
	Scale
	Enterprise

	tierCount // keep last: the number of tiers
)

// Compile-time assertion: TierTable has exactly one Limits entry per Tier.
// If a Tier constant is added without a TierTable field (or the reverse),
// one of these array lengths is negative and the package does not compile.
var (
	_ [uintptr(tierCount) - unsafe.Sizeof(TierTable{})/unsafe.Sizeof(Limits{})]struct{}
	_ [unsafe.Sizeof(TierTable{})/unsafe.Sizeof(Limits{}) - uintptr(tierCount)]struct{}
)

var tierNames = [tierCount]string{
	Free:       "free",
	Developer:  "developer",
	Team:       "team",
	Growth:     "growth",
	Scale:      "scale",
	Enterprise: "enterprise",
}

// String returns the tier's lower-case name, e.g. "free". An out-of-range
// tier prints as "tier(N)".
func (t Tier) String() string {
	if t >= 0 && t < tierCount {
		return tierNames[t]
	}
	return fmt.Sprintf("tier(%d)", int(t))
}

// ParseTier parses a tier name as String prints it, ignoring case and
// surrounding space. An unknown name returns Free and an error.
func ParseTier(s string) (Tier, error) {
	s = strings.TrimSpace(s)
	for t, name := range tierNames {
		if strings.EqualFold(s, name) {
			return Tier(t), nil
		}
	}
	return Free, fmt.Errorf("llmrate: unknown tier %q", s)
}

// Limits are the two sustained per-minute figures of a tier, its optional
// concurrency cap, and its optional windows. Each per-minute bucket holds
// twice its figure (the burst) and refills at the figure per minute.
type Limits struct {
	RequestsPerMinute int64
	TokensPerMinute   int64
	// ConcurrentRequests is the most requests in flight at once: of the key
	// (in the key's figures) and of the workspace, all its keys together
	// (in the workspace's). A request holds its slot from admission until
	// its response has ended (its handler returned, panicked, or the
	// response was cut, hijacked or failed to write). 0, the default in
	// every tier of DefaultTiers, sets no cap; a negative figure is
	// invalid.
	ConcurrentRequests int64
	// Windows are limits over other windows and meters, each checked in
	// the same atomic step as the per-minute buckets (see Window): e.g. a
	// daily request quota, or a provider's separate input and output
	// tokens per minute. nil (the default): none. At most MaxWindows, no
	// two with one Per; each window's Per in [MinWindow, MaxWindow] in
	// whole milliseconds, each figure in [0, MaxPerMinute], not all four
	// 0. Limits holds a slice, so compare two with Equal.
	Windows []Window
}

// Window is one limit over a window other than the per-minute figures'
// (Limits.Windows): at most Requests requests, Tokens tokens, InputTokens
// input tokens and OutputTokens output tokens per Per, each meter its own
// bucket. A figure of 0 leaves that meter unlimited in this window.
//
// A rolling window's bucket (no Calendar, no Session) holds its figure (no
// burst: the per-minute figures' twofold burst is theirs alone) and
// refills the figure per Per, continuously, in the same exact integer
// arithmetic as the per-minute buckets: idle, it comes back exactly full,
// and it never resets all at once (a Calendar window is the one that
// does). So Window{Per: 24 * time.Hour, Requests: 1_500} is a daily
// request quota that gives one request back every 57.6 s, and
// Window{Per: time.Minute, InputTokens: 400_000, OutputTokens: 80_000}
// holds a key to a provider's separate input and output limits.
//
// The meters:
//   - Requests: one per admission, never reconciled (as RequestsPerMinute).
//   - Tokens: what TokensPerMinute is charged (the estimate at admission,
//     replaced by the charge after the response).
//   - InputTokens: debited the input estimate at admission (the estimate;
//     with EstimateFromBody its prompt part alone, without the max_tokens
//     allowance; calibration scales only the Tokens meters), replaced by
//     the reported input tokens less cache reads (Usage.InputTokens −
//     Usage.CachedInputTokens; unreported: the input estimate).
//   - OutputTokens: debited nothing at admission (a request is admitted
//     while the bucket holds at least 1), charged the reported output
//     tokens (unreported or partial: the larger of the reported output and
//     the generated text's bytes ÷ 4).
//
// Each charge is bounded at twice its own bucket's capacity (the figure).
type Window struct {
	// Per is the window: from 1 s to 744 h (31 days), in whole
	// milliseconds. 0 with a Calendar (the period is the calendar's).
	Per time.Duration
	// The most per window; 0: that meter is not limited in this window.
	Requests, Tokens, InputTokens, OutputTokens int64
	// Calendar, with Per 0, makes the window a quota that resets instead
	// of refilling: it holds its figures for each calendar period (a day,
	// an ISO week from Monday, a month from the 1st) and is full again at
	// the next period's start, 00:00 in Zone. NoCalendar (the default): a
	// rolling window that refills continuously.
	Calendar Calendar
	// Zone is the calendar's time zone, required with a Calendar and only
	// with one: time.UTC or a location from time.LoadLocation (not
	// time.Local, not a time.FixedZone), compared by name. Processes that
	// share a store must use one tzdata version (embed time/tzdata to be
	// sure).
	Zone *time.Location
	// Session, with Per, makes the window a session: it opens at the first
	// admission that finds it unused, holds its figures until Per after
	// that, then is full again. Nothing refills within a session. Per at
	// most 744 h; not with a Calendar.
	Session bool
}

// Calendar is the period a calendar window (Window.Calendar) resets at.
type Calendar uint8

// The calendars. Periods are calendar periods in the window's Zone, not
// durations: a day at a DST change lasts 23 or 25 hours, a month 28 to 31
// days.
const (
	NoCalendar    Calendar = iota // a rolling window (Per)
	CalendarDay                   // from 00:00 to the next day's 00:00
	CalendarWeek                  // from Monday 00:00 (ISO 8601 weeks)
	CalendarMonth                 // from the 1st at 00:00
)

// String returns "day", "week", "month", or "" for NoCalendar.
func (c Calendar) String() string {
	switch c {
	case CalendarDay:
		return "day"
	case CalendarWeek:
		return "week"
	case CalendarMonth:
		return "month"
	}
	return ""
}

// Unlimited, as a RequestsPerMinute or TokensPerMinute figure, means that
// per-minute meter is not limited there: no bucket, no debit, no rate
// limit header for it, and no part in Retry-After. Only -1 is Unlimited:
// 0 and other negative figures are invalid, so that a forgotten figure
// never opens a plan. When figures combine (an override over a tier, a
// key's figures over the workspace's), Unlimited yields to any figure.
const Unlimited int64 = -1

// MaxWindows is the most windows one Limits may carry.
const MaxWindows = 4

// The bounds on Window.Per.
const (
	MinWindow = time.Second
	MaxWindow = 744 * time.Hour
)

func (w Window) validate() error {
	name := w.name()
	switch {
	case w.Calendar > CalendarMonth:
		return fmt.Errorf("window %s: unknown Calendar %d", name, w.Calendar)
	case w.Calendar != NoCalendar && w.Per != 0:
		return fmt.Errorf("window %s: a Calendar window takes no Per (got %v)", name, w.Per)
	case w.Calendar != NoCalendar && w.Zone == nil:
		return fmt.Errorf("window %s: a Calendar window needs a Zone (time.UTC or a time.LoadLocation zone)", name)
	case w.Calendar == NoCalendar && w.Zone != nil:
		return fmt.Errorf("window %v: a Zone needs a Calendar", w.Per)
	case w.Session && w.Calendar != NoCalendar:
		return fmt.Errorf("window %s: Session and Calendar exclude each other", name)
	case w.Session && w.Per == 0:
		return fmt.Errorf("window session: Session needs a Per")
	}
	if w.Zone != nil {
		if err := validZone(w.Zone); err != nil {
			return fmt.Errorf("window %s: %w", name, err)
		}
	}
	if w.Calendar == NoCalendar {
		if w.Per < MinWindow || w.Per > MaxWindow {
			return fmt.Errorf("window Per %v out of range [%v, %v]", w.Per, MinWindow, MaxWindow)
		}
		if w.Per%time.Millisecond != 0 {
			return fmt.Errorf("window Per %v: must be whole milliseconds", w.Per)
		}
	}
	for _, f := range [...]struct {
		name string
		v    int64
	}{{"Requests", w.Requests}, {"Tokens", w.Tokens}, {"InputTokens", w.InputTokens}, {"OutputTokens", w.OutputTokens}} {
		if f.v < 0 || f.v > MaxPerMinute {
			return fmt.Errorf("window %s: %s %d out of range [0, %d]", name, f.name, f.v, int64(MaxPerMinute))
		}
	}
	if w.Requests == 0 && w.Tokens == 0 && w.InputTokens == 0 && w.OutputTokens == 0 {
		return fmt.Errorf("window %s: every figure is 0 (set at least one)", name)
	}
	return nil
}

// validZone accepts time.UTC and locations loaded by name (time.LoadLocation):
// a zone is identified by its name, so that two processes (or a process
// and Redis's record) agree on it. time.Local names no zone, and a
// time.FixedZone has no calendar of its own.
func validZone(loc *time.Location) error {
	if loc == time.UTC {
		return nil
	}
	if loc == time.Local {
		return errors.New("zone time.Local names no zone: load one with time.LoadLocation")
	}
	if c, ok := zonesChecked.Load(loc); ok {
		return c.(zoneCheck).err // an override is validated on every request: load the zone once
	}
	err := checkZone(loc)
	if zonesCheckedCount.Add(1) <= maxZonesChecked {
		zonesChecked.Store(loc, zoneCheck{err})
	}
	return err
}

// zonesChecked remembers validZone's answer (a zoneCheck) per location,
// for at most maxZonesChecked locations.
var (
	zonesChecked      sync.Map
	zonesCheckedCount atomic.Int64
)

const maxZonesChecked = 4096

type zoneCheck struct{ err error }

func checkZone(loc *time.Location) error {
	name := loc.String()
	l, err := time.LoadLocation(name)
	if err != nil || name == "" || name == "Local" {
		return fmt.Errorf("zone %q is not a location time.LoadLocation knows (a time.FixedZone has no calendar)", name)
	}
	// A FixedZone may carry a tzdata name: it must also be that zone.
	t := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	for i := 0; i < 2; i++ {
		_, a := t.In(l).Zone()
		_, b := t.In(loc).Zone()
		if a != b {
			return fmt.Errorf("zone %q is not the location of that name (a time.FixedZone has no calendar)", name)
		}
		t = t.AddDate(0, 6, 0)
	}
	return nil
}

// name names w in a configuration error: its Per, its calendar, or its
// session.
func (w Window) name() string {
	switch {
	case w.Calendar != NoCalendar:
		z := "no zone"
		if w.Zone != nil {
			z = w.Zone.String()
		}
		return "calendar " + w.Calendar.String() + " (" + z + ")"
	case w.Session:
		return "session " + w.Per.String()
	}
	return w.Per.String()
}

// sameWindow reports whether v and w are one window's identity in a scope
// and model: (Per, Calendar, zone name, Session).
func sameWindow(v, w Window) bool {
	return v.Per == w.Per && v.Calendar == w.Calendar && v.Session == w.Session && zoneName(v.Zone) == zoneName(w.Zone)
}

func zoneName(l *time.Location) string {
	if l == nil {
		return ""
	}
	return l.String()
}

// validateWindows checks a Limits' windows: each valid, at most MaxWindows,
// no two of one identity (Per, Calendar, Zone's name, Session).
func validateWindows(ws []Window) error {
	if len(ws) > MaxWindows {
		return fmt.Errorf("%d windows: at most %d", len(ws), MaxWindows)
	}
	for i, w := range ws {
		if err := w.validate(); err != nil {
			return err
		}
		for _, v := range ws[:i] {
			if sameWindow(v, w) {
				return fmt.Errorf("two windows %s", w.name())
			}
		}
	}
	return nil
}

// MaxPerMinute is the largest per-minute figure New accepts. The bucket
// arithmetic is exact for every figure up to it and any elapsed time.
const MaxPerMinute = 1_000_000_000_000

func (l Limits) validate() error {
	if err := validPerMinute("RequestsPerMinute", l.RequestsPerMinute); err != nil {
		return err
	}
	if err := validPerMinute("TokensPerMinute", l.TokensPerMinute); err != nil {
		return err
	}
	if l.ConcurrentRequests < 0 {
		return fmt.Errorf("ConcurrentRequests %d: must not be negative (0: no cap)", l.ConcurrentRequests)
	}
	if l.Windows != nil {
		return validateWindows(l.Windows)
	}
	return nil
}

func validPerMinute(name string, v int64) error {
	if v == Unlimited {
		return nil
	}
	if v < 1 || v > MaxPerMinute {
		return fmt.Errorf("%s %d out of range [1, %d] (or Unlimited, -1)", name, v, int64(MaxPerMinute))
	}
	return nil
}

// quotas reports whether l uses anything a store must declare support
// for (QuotaStore): an Unlimited figure, a calendar or a session window.
func (l Limits) quotas() bool {
	if l.RequestsPerMinute == Unlimited || l.TokensPerMinute == Unlimited {
		return true
	}
	for _, w := range l.Windows {
		if w.Calendar != NoCalendar || w.Session {
			return true
		}
	}
	return false
}

// TierTable holds the figures of every tier, one field per Tier constant.
type TierTable struct {
	Free, Developer, Team, Growth, Scale, Enterprise Limits
}

// DefaultTiers returns the published figures. Team deliberately equals
// Developer. Enterprise's figures are enforced but never published: the
// limits endpoint answers null for them.
func DefaultTiers() TierTable {
	return TierTable{
		Free:       Limits{RequestsPerMinute: 100, TokensPerMinute: 200_000},
		Developer:  Limits{RequestsPerMinute: 1_000, TokensPerMinute: 2_000_000},
		Team:       Limits{RequestsPerMinute: 1_000, TokensPerMinute: 2_000_000},
		Growth:     Limits{RequestsPerMinute: 5_000, TokensPerMinute: 10_000_000},
		Scale:      Limits{RequestsPerMinute: 20_000, TokensPerMinute: 40_000_000},
		Enterprise: Limits{RequestsPerMinute: 50_000, TokensPerMinute: 100_000_000},
	}
}

// For returns the figures of tier t. An out-of-range tier gets Free's
// figures, the most conservative published row.
func (tt TierTable) For(t Tier) Limits {
	switch t {
	case Free:
		return tt.Free
	case Developer:
		return tt.Developer
	case Team:
		return tt.Team
	case Growth:
		return tt.Growth
	case Scale:
		return tt.Scale
	case Enterprise:
		return tt.Enterprise
	}
	return tt.Free
}

func (tt TierTable) validate() error {
	for t := Tier(0); t < tierCount; t++ {
		if err := tt.For(t).validate(); err != nil {
			return fmt.Errorf("tier %s: %w", t, err)
		}
	}
	return nil
}

// TierResolver maps a workspace to its tier. ok=false means the workspace
// is unknown; it is then admitted at Free. ResolveTier is called on every
// request and must be fast and safe for concurrent use (e.g. read an
// atomically swapped snapshot).
type TierResolver interface {
	ResolveTier(ctx context.Context, workspace string) (Tier, bool)
}

// TierResolverFunc adapts a function to TierResolver.
type TierResolverFunc func(ctx context.Context, workspace string) (Tier, bool)

// ResolveTier calls f.
func (f TierResolverFunc) ResolveTier(ctx context.Context, workspace string) (Tier, bool) {
	return f(ctx, workspace)
}

// StaticTiers is a TierResolver backed by a fixed map. Workspaces absent from
// the map are unknown (Free).
type StaticTiers map[string]Tier

// ResolveTier looks the workspace up in the map.
func (m StaticTiers) ResolveTier(_ context.Context, workspace string) (Tier, bool) {
	t, ok := m[workspace]
	return t, ok
}

// knownTier is the tier a resolver's answer puts a workspace on: t when the
// resolver knew the workspace and t names a tier, else Free.
func knownTier(t Tier, known bool) Tier {
	if !known || t < 0 || t >= tierCount {
		return Free
	}
	return t
}

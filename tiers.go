package llmrate

import (
	"context"
	"fmt"
	"strings"
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

// Limits are the two sustained per-minute figures of a tier, and its
// optional concurrency cap. Each bucket holds twice its figure (the burst)
// and refills at the figure per minute.
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
}

// MaxPerMinute is the largest per-minute figure New accepts. The bucket
// arithmetic is exact for every figure up to it and any elapsed time.
const MaxPerMinute = 1_000_000_000_000

func (l Limits) validate() error {
	if l.RequestsPerMinute < 1 || l.RequestsPerMinute > MaxPerMinute {
		return fmt.Errorf("RequestsPerMinute %d out of range [1, %d]", l.RequestsPerMinute, int64(MaxPerMinute))
	}
	if l.TokensPerMinute < 1 || l.TokensPerMinute > MaxPerMinute {
		return fmt.Errorf("TokensPerMinute %d out of range [1, %d]", l.TokensPerMinute, int64(MaxPerMinute))
	}
	if l.ConcurrentRequests < 0 {
		return fmt.Errorf("ConcurrentRequests %d: must not be negative (0: no cap)", l.ConcurrentRequests)
	}
	return nil
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

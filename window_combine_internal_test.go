package llmrate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Key tiers under an override: windows pair by Per, each meter takes the
// tighter non-zero figure, and a window or a meter on one side only is
// kept as it is.
func TestCombineWindowsPairsByPer(t *testing.T) {
	t.Parallel()
	day, hour := 24*time.Hour, time.Hour
	key := []Window{{Per: day, Requests: 1500, Tokens: 0, InputTokens: 9}, {Per: time.Minute, OutputTokens: 80}}
	over := []Window{{Per: hour, Tokens: 7}, {Per: day, Requests: 2000, Tokens: 50_000, InputTokens: 4}}
	assert.Equal(t, []Window{
		{Per: day, Requests: 1500, Tokens: 50_000, InputTokens: 4},
		{Per: time.Minute, OutputTokens: 80},
		{Per: hour, Tokens: 7},
	}, combineWindows(key, over))
	assert.Equal(t, key, combineWindows(key, nil))
	assert.Equal(t, over, combineWindows(nil, over))
	assert.Nil(t, combineWindows(nil, nil))
}

func TestWindowNames(t *testing.T) {
	t.Parallel()
	for per, want := range map[time.Duration]string{time.Second: "second", time.Minute: "minute", time.Hour: "hour",
		24 * time.Hour: "day", 6 * time.Hour: "6h0m0s", 1500 * time.Millisecond: "1.5s"} {
		assert.Equal(t, want, windowName(per))
	}
}

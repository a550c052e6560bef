package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
)

func TestSnapshotRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var version atomic.Int64
		snap := NewSnapshot(context.Background(), 5*time.Second, func(context.Context) (map[string]llmrate.Tier, error) {
			switch version.Load() {
			case 0:
				return map[string]llmrate.Tier{"acme": llmrate.Developer}, nil
			case 1:
				return nil, errors.New("control plane down")
			}
			return map[string]llmrate.Tier{"acme": llmrate.Scale, "new": llmrate.Team}, nil
		})
		defer snap.Close()
		tier := func(ws string) llmrate.Tier { t, _ := snap.ResolveTier(context.Background(), ws); return t }
		assert.Equal(t, llmrate.Developer, tier("acme"))
		_, known := snap.ResolveTier(context.Background(), "new")
		assert.False(t, known, "not pushed yet: unknown, so the limiter uses Free")

		version.Store(1)
		time.Sleep(5 * time.Second) // fake time inside the bubble
		synctest.Wait()
		assert.Equal(t, llmrate.Developer, tier("acme"), "a failed refresh keeps the last snapshot")
		assert.Equal(t, int64(1), snap.errors.Load())

		version.Store(2)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.Equal(t, llmrate.Scale, tier("acme"))
		assert.Equal(t, llmrate.Team, tier("new"))
	}) // synctest fails the test if the refresh goroutine leaked past Close
}

package main

import (
	"context"
	"errors"

	"github.com/llmrate/llmrate"
	"go.uber.org/zap"
)

// storeOptions returns the store options for -redis (none: per-process
// memory) and a function that releases the store.
func storeOptions(_ context.Context, redisURL string, _ *zap.Logger) ([]llmrate.Option, func(), error) {
	if redisURL == "" {
		return nil, func() {}, nil
	}
	return nil, nil, errors.New("-redis: not built yet")
}

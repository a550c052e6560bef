package main

import (
	"context"
	"fmt"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// storeOptions returns the store options for -redis (none: per-process
// memory) and a function that releases the store.
func storeOptions(ctx context.Context, redisURL string, timeout time.Duration, leases float64, log *zap.Logger) ([]llmrate.Option, func(), error) {
	if redisURL == "" {
		return nil, func() {}, nil
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("-redis: %w", err)
	}
	opt.DialTimeout = 100 * time.Millisecond
	opt.MaxRetries = -1 // a retry would blow the store timeout; fail open instead
	client := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		// Start anyway: the limiter fails open until Redis answers.
		log.Warn("redis not reachable at start; failing open until it is", zap.Error(err))
	}
	ropts := []redisstore.Option{redisstore.WithTimeout(timeout)}
	if leases != 0 {
		ropts = append(ropts, redisstore.WithLeases(leases))
	}
	store, err := redisstore.New(client, ropts...)
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return []llmrate.Option{llmrate.WithStore(store)}, func() { _ = client.Close() }, nil
}

package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// storeOptions returns the store options for -redis (none: per-process
// memory) and a function that releases the store. The Redis store's names
// are keyed by the secret in the environment variable hashKeyEnv, which
// every gateway sharing the Redis must set alike.
func storeOptions(ctx context.Context, redisURL string, timeout time.Duration, leases float64, hashKeyEnv string, log *zap.Logger) ([]llmrate.Option, func(), error) {
	if redisURL == "" {
		return nil, func() {}, nil // the memory store keeps no names: no secret needed
	}
	hashKey, err := hashKeyFrom(hashKeyEnv, log)
	if err != nil {
		return nil, nil, err
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("-redis: %w", err)
	}
	opt.DialTimeout = 100 * time.Millisecond
	opt.MaxRetries = -1              // the store resends a call whose reply was lost itself, within its timeout
	opt.ContextTimeoutEnabled = true // calls end at their deadline (WithTimeout) in go-redis itself
	client := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		// Start anyway: the limiter fails open until Redis answers.
		log.Warn("redis not reachable at start; failing open until it is", zap.Error(err))
	}
	ropts := []redisstore.Option{redisstore.WithHashKey(hashKey), redisstore.WithTimeout(timeout)}
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

// hashKeyFrom reads the secret for Redis key names from the environment
// variable env. Unset, it generates a random one for this process alone and
// says so: fine for a one-process demo, but gateways sharing one Redis then
// keep separate buckets, so the limit is not shared.
func hashKeyFrom(env string, log *zap.Logger) ([]byte, error) {
	if v := os.Getenv(env); v != "" {
		if len(v) < redisstore.MinHashKeyLen {
			return nil, fmt.Errorf("$%s: %d bytes, want at least %d", env, len(v), redisstore.MinHashKeyLen)
		}
		return []byte(v), nil
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	log.Warn("no Redis hash key set: using a random one for this process only; gateways sharing this Redis will NOT share limits until every one has the same secret in $"+env,
		zap.String("env", env), zap.Int("min_bytes", redisstore.MinHashKeyLen))
	return key, nil
}

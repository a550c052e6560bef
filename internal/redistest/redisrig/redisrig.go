// Package redisrig is the Redis tests' shared setup: a redis-server
// (package redistest) with a go-redis client on it, and redisstore.Stores
// on fresh key prefixes, each closed when the test ends. Tests only: it
// imports go-redis and redisstore, which the root package never does.
//
// A test on one server is two lines:
//
//	_, c := redisrig.Start(t)
//	s := redisrig.Store(t, c, redisstore.WithClock(clock))
//
// and n gateway processes sharing one Redis are redisrig.Stores(t, c, n).
package redisrig

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate/internal/faultproxy"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
)

// Secret is the tests' secret for key names (redisstore.WithHashKey is
// required).
var Secret = []byte("redisstore-test-secret-0123456789")

// HashKey is redisstore.WithHashKey(Secret), for tests that call
// redisstore.New themselves.
var HashKey = redisstore.WithHashKey(Secret)

// Timeout is the stores' WithTimeout unless a test passes its own.
const Timeout = time.Second

var prefixes atomic.Int64

// Prefix returns a key prefix ("t1", "t2", ...) no other store in this
// test binary was given by this package.
func Prefix() string { return "t" + strconv.FormatInt(prefixes.Add(1), 10) }

// Start starts a redis-server (redistest.Start: skipped, or failed under
// LLMRATE_REQUIRE_REDIS=1, where none is installed) and returns it with a
// Client on it.
func Start(t testing.TB, extra ...string) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t, extra...)
	return srv, Client(t, srv.Addr)
}

// Proxy returns a fault proxy (package faultproxy) in front of addr, its
// faults drawn from seed, closed when the test ends.
func Proxy(t testing.TB, addr string, seed uint64) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(addr, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Client returns a client on addr that never retries a command itself
// (MaxRetries -1) and gives up dialing after 200 ms, closed when the test
// ends.
func Client(t testing.TB, addr string) *redis.Client {
	t.Helper()
	return NewClient(t, &redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
}

// ContextClient returns a client on addr as docs/redis.md builds one: it
// ends a call at its context's deadline (ContextTimeoutEnabled) and never
// retries a command itself (MaxRetries -1); closed when the test ends.
func ContextClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	return NewClient(t, &redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
}

// NewClient returns redis.NewClient(opts), closed when the test ends.
func NewClient(t testing.TB, opts *redis.Options) *redis.Client {
	t.Helper()
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Store returns a store on c with a fresh Prefix, HashKey and Timeout, then
// opts (a later option wins: WithPrefix, WithTimeout, WithHashKey replace
// those). It is not closed: a test that needs Close calls it, or uses
// Stores.
func Store(t testing.TB, c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, options(Prefix(), opts)...)
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	return s
}

// Stores returns n stores on c sharing one fresh Prefix (n gateway
// processes on one Redis), built as Store builds one, each closed when the
// test ends with Close's error asserted nil.
func Stores(t testing.TB, c redis.UniversalClient, n int, opts ...redisstore.Option) []*redisstore.Store {
	t.Helper()
	p := Prefix()
	out := make([]*redisstore.Store, n)
	for i := range out {
		s, err := redisstore.New(c, options(p, opts)...)
		if err != nil {
			t.Fatalf("redisstore.New: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(context.Background()); err != nil {
				t.Errorf("closing store %d of %d: %v", i+1, n, err)
			}
		})
		out[i] = s
	}
	return out
}

func options(prefix string, opts []redisstore.Option) []redisstore.Option {
	return append([]redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithTimeout(Timeout), HashKey}, opts...)
}

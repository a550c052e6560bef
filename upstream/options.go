package upstream

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/llmrate/llmrate"
	"go.uber.org/zap"
)

// DefaultMaxAttempts is how many attempts may reach a provider per request
// unless WithMaxAttempts says otherwise.
const DefaultMaxAttempts = 3

// MaxReplayBody is the largest request body buffered to be replayed on
// another key: a body without GetBody that is larger is sent once, and a
// provider 429 to it is returned as sent.
const MaxReplayBody = 1 << 20

// Option configures a Transport. Options only record values; New fills the
// defaults and validates them once.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	base        http.RoundTripper
	store       llmrate.Store
	clock       func() time.Time
	maxAttempts int
	estimator   func(*http.Request) int64
	logger      *zap.Logger
	observer    Observer
	timeout     time.Duration
	errs        []error
}

func (c *config) fail(option string, err error) {
	c.errs = append(c.errs, &llmrate.ConfigError{Option: option, Err: err})
}

var errNil = errors.New("must not be nil")

// WithBase sets the RoundTripper that carries each attempt to the
// provider. Default: http.DefaultTransport. nil is an error.
func WithBase(rt http.RoundTripper) Option {
	return optionFunc(func(c *config) {
		if rt == nil {
			c.fail("WithBase", errNil)
		}
		c.base = rt
	})
}

// WithStore sets where the keys' buckets live. Default: a new
// llmrate.MemoryStore (per process). A shared store (redisstore) holds each
// key to one limit across every gateway process using it: a key's buckets
// are named by the key's Name alone (the workspace
// llmrate.ReservedWorkspacePrefix+Name, "upstream:"+Name). nil is an
// error.
//
// The store may be the one an llmrate.Limiter uses: the middleware refuses
// (401 invalid_api_key) every request whose workspace begins "upstream:",
// the caller's key included where it is its own workspace (the default),
// so no caller reaches a provider key's buckets. The store's own options
// apply to the keys' buckets too (redisstore.WithLeases, say); give the
// Transport a store of its own (for Redis, a redisstore.Store with a
// WithPrefix of its own on the same client) to keep them apart. A store
// shared with anything other than that middleware must keep the prefix
// to the Transport.
func WithStore(s llmrate.Store) Option {
	return optionFunc(func(c *config) {
		if s == nil {
			c.fail("WithStore", errNil)
		}
		c.store = s
	})
}

// WithClock sets the clock the buckets and the provider's reset times are
// read on. Default: time.Now. nil is an error.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now == nil {
			c.fail("WithClock", errNil)
		}
		c.clock = now
	})
}

// WithMaxAttempts bounds the attempts of one request that reach a provider
// (a key skipped by its own buckets or by an earlier provider refusal is not
// an attempt). Default: DefaultMaxAttempts. n must be at least 1.
func WithMaxAttempts(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.fail("WithMaxAttempts", fmt.Errorf("%d: must be at least 1", n))
		}
		c.maxAttempts = n
	})
}

// WithEstimator sets the token estimate a request debits from a key's
// tokens bucket before it is sent. Default: llmrate.EstimateTokens
// (Content-Length / 4, floor 1). A result below 1 counts as 1. The
// estimator sees a copy of the request whose body it may read: the request
// sent is not affected. nil is an error.
func WithEstimator(f func(*http.Request) int64) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.fail("WithEstimator", errNil)
		}
		c.estimator = f
	})
}

// WithLogger sets the logger. If nil or unset, nothing is logged. Faults
// are logged at warn; skips and provider refusals at debug. A key appears
// by its Name, never its credential.
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithObserver receives an event for every key considered for a request and
// every reconcile. nil (the default) observes nothing.
func WithObserver(o Observer) Option {
	return optionFunc(func(c *config) { c.observer = o })
}

// WithStoreTimeout bounds each store call (it is the deadline of the
// call's context; the store must honour it, as redisstore does). Past it
// the key is used unchecked (admission), counted and logged, or the
// reconcile is retried for ReconcileRetryFor, then dropped with its
// estimate standing, counted and logged. Default:
// llmrate.DefaultStoreTimeout.
// d must be positive.
func WithStoreTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("WithStoreTimeout", fmt.Errorf("%v: must be positive", d))
		}
		c.timeout = d
	})
}

func newConfig(opts []Option) (*config, error) {
	c := &config{
		base:        http.DefaultTransport,
		clock:       time.Now,
		maxAttempts: DefaultMaxAttempts,
		timeout:     llmrate.DefaultStoreTimeout,
	}
	for _, o := range opts {
		if o == nil {
			c.fail("Option", errNil)
			continue
		}
		o.apply(c)
	}
	if c.store == nil && len(c.errs) == 0 {
		c.store = llmrate.NewMemoryStore()
	}
	if c.logger == nil {
		c.logger = zap.NewNop()
	}
	return c, errors.Join(c.errs...)
}

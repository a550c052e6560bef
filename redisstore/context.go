package redisstore

import "github.com/redis/go-redis/v9"

// HonoursContext reports true: every call the store makes returns by its
// context's deadline (and WithTimeout), whatever the client. On a client
// built with ContextTimeoutEnabled, go-redis itself ends a call there, at
// no extra cost; on any other (go-redis then bounds a read by its own
// ReadTimeout, 3 s by default, not by the context) the store runs each call
// on a goroutine of its own and stops waiting for it at the deadline: the
// goroutine, and its connection, stay until the client gives up, and at
// most 256 such calls may be in flight (past that a call fails at once,
// counted as a Redis failure). So prefer a client with
// ContextTimeoutEnabled: true, as docs/redis.md's example builds. The limiter
// then calls the store directly on the request's goroutine.
func (s *Store) HonoursContext() bool { return true }

// clientHonoursContext reports whether go-redis ends client's calls at
// their context's deadline.
func clientHonoursContext(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

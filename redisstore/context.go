package redisstore

import "github.com/redis/go-redis/v9"

// HonoursContext reports whether the store's calls return once their
// context is done: true when the client was built with
// ContextTimeoutEnabled (go-redis otherwise bounds a call by its own read
// and write timeouts, 3 s by default, not by the context). The limiter then
// calls the store directly on the request's goroutine, which costs less than
// its guarded call on a goroutine of its own. Set ContextTimeoutEnabled:
// true on the client you pass to New.
func (s *Store) HonoursContext() bool {
	switch c := s.c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

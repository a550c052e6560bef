// Command redis shares one limit between gateway processes through Redis.
// Run it twice (-listen 127.0.0.1:8081, 127.0.0.1:8082) against the same
// -redis, with the same secret in $LLMRATE_HASH_KEY: a key's burst of 200
// is shared, not doubled.
package main

import (
	"flag"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
)

// newLimiter builds the limiter; storeOpts and opts come after (and so
// override) the defaults.
func newLimiter(client redis.UniversalClient, hashKey []byte, storeOpts []redisstore.Option, opts ...llmrate.Option) (*llmrate.Limiter, error) {
	store, err := redisstore.New(client, append([]redisstore.Option{
		redisstore.WithHashKey(hashKey),               // the same secret on every gateway
		redisstore.WithTimeout(30 * time.Millisecond), // below the limiter's 50 ms
		redisstore.WithFallbackLocal(),                // per-process limits while Redis is down
	}, storeOpts...)...)
	if err != nil {
		return nil, err
	}
	return llmrate.New(append([]llmrate.Option{llmrate.WithStore(store)}, opts...)...)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address")
	addr := flag.String("redis", "127.0.0.1:6379", "redis address")
	flag.Parse()
	hashKey := os.Getenv("LLMRATE_HASH_KEY") // at least 16 bytes, shared by the gateways
	if hashKey == "" {
		log.Fatal("set LLMRATE_HASH_KEY to a secret of at least 16 bytes, the same for every gateway")
	}
	client := redis.NewClient(&redis.Options{Addr: *addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	lim, err := newLimiter(client, []byte(hashKey), nil)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(*listen, lim.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))))
}

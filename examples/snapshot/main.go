// Command snapshot feeds the tier resolver from a snapshot the control plane
// publishes, refreshed periodically and swapped atomically: the hot path
// reads a map, never waits for the network. A workspace missing from the
// snapshot (e.g. a plan whose push has not arrived yet) admits at Free.
package main

import (
	"context"
	"log"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmrate/llmrate"
)

// Snapshot is a TierResolver refreshed in the background.
type Snapshot struct {
	tiers  atomic.Pointer[map[string]llmrate.Tier]
	fetch  func(context.Context) (map[string]llmrate.Tier, error)
	stop   context.CancelFunc
	done   sync.WaitGroup
	errors atomic.Int64
}

// NewSnapshot loads the snapshot once and refreshes it every interval until
// Close. A failed refresh keeps the previous snapshot.
func NewSnapshot(ctx context.Context, every time.Duration, fetch func(context.Context) (map[string]llmrate.Tier, error)) *Snapshot {
	s := &Snapshot{fetch: fetch}
	ctx, s.stop = context.WithCancel(ctx)
	s.refresh(ctx)
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.refresh(ctx)
			}
		}
	}()
	return s
}

func (s *Snapshot) refresh(ctx context.Context) {
	m, err := s.fetch(ctx)
	if err != nil {
		s.errors.Add(1)
		return
	}
	s.tiers.Store(&m)
}

// ResolveTier implements llmrate.TierResolver.
func (s *Snapshot) ResolveTier(_ context.Context, ws string) (llmrate.Tier, bool) {
	if m := s.tiers.Load(); m != nil {
		t, ok := (*m)[ws]
		return t, ok
	}
	return llmrate.Free, false
}

// Close stops the refresh goroutine and waits for it.
func (s *Snapshot) Close() {
	s.stop()
	s.done.Wait()
}

func main() {
	snap := NewSnapshot(context.Background(), 5*time.Second, func(context.Context) (map[string]llmrate.Tier, error) {
		return map[string]llmrate.Tier{"sk-growth": llmrate.Growth}, nil // e.g. GET your control plane
	})
	defer snap.Close()
	lim, err := llmrate.New(llmrate.WithTierResolver(snap))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", lim.Middleware(http.NotFoundHandler())))
}

package llmrate_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// statsStore is a store that counts (llmrate.StoreStats).
type statsStore struct {
	llmrate.Store
	errors int64
}

func (s *statsStore) StoreStats() llmrate.StoreCounters {
	return llmrate.StoreCounters{Errors: s.errors}
}

// statsObserver is an observer that reads stores' counters.
type statsObserver struct {
	countingObserver
	observing atomic.Int64
	seen      atomic.Pointer[llmrate.StoreStats]
}

func (o *statsObserver) ObserveStore(s llmrate.StoreStats) (stop func()) {
	o.observing.Add(1)
	o.seen.Store(&s)
	return func() { o.observing.Add(-1) }
}

// TestStoreStatsHandedToObserver: New hands an observer that reads
// stores' counters (llmrate.StoreStatsObserver) the limiter's store when
// it counts (llmrate.StoreStats), and Close takes it back; a store that
// does not count is not handed over.
func TestStoreStatsHandedToObserver(t *testing.T) {
	t.Parallel()
	store := &statsStore{Store: llmrate.NewMemoryStore(), errors: 7}
	o := &statsObserver{}
	l1, err := llmrate.New(llmrate.WithStore(store), llmrate.WithObserver(o))
	require.NoError(t, err)
	l2, err := llmrate.New(llmrate.WithStore(store), llmrate.WithObserver(o))
	require.NoError(t, err)
	assert.Equal(t, int64(2), o.observing.Load(), "one ObserveStore per limiter")
	require.NotNil(t, o.seen.Load())
	assert.Equal(t, int64(7), (*o.seen.Load()).StoreStats().Errors, "the limiter's store")
	require.NoError(t, l1.Close(context.Background()))
	assert.Equal(t, int64(1), o.observing.Load(), "Close stops it")
	require.NoError(t, l1.Close(context.Background()))
	assert.Equal(t, int64(1), o.observing.Load(), "once")
	require.NoError(t, l2.Close(context.Background()))
	assert.Zero(t, o.observing.Load())

	plain := &statsObserver{}
	l3, err := llmrate.New(llmrate.WithStore(llmrate.NewMemoryStore()), llmrate.WithObserver(plain))
	require.NoError(t, err)
	assert.Zero(t, plain.observing.Load(), "the memory store does not count: nothing to observe")
	require.NoError(t, l3.Close(context.Background()))
}

package llmrate

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type nopObserver struct{ id int }

func (nopObserver) Decided(DecisionEvent)     {}
func (nopObserver) Reconciled(ReconcileEvent) {}
func (nopObserver) FailedOpen(FailOpenEvent)  {}
func (nopObserver) Evicted()                  {}

// TestLimiterUnsubscribesWhenCollected: a store that outlives its limiters
// (rebuilt on every config reload, say) does not keep their observers,
// whether a limiter was closed or only dropped.
func TestLimiterUnsubscribesWhenCollected(t *testing.T) {
	s := NewMemoryStore()
	keep, err := New(WithStore(s), WithObserver(nopObserver{1}))
	require.NoError(t, err)
	func() {
		for i := range 3 {
			_, err := New(WithStore(s), WithObserver(nopObserver{2 + i}))
			require.NoError(t, err)
		}
	}()
	require.Eventually(t, func() bool { runtime.GC(); return s.t.Subscribers() == 1 }, 10*time.Second, 10*time.Millisecond,
		"the three dropped limiters' observers are unsubscribed")
	require.NoError(t, keep.Close(context.Background()))
	assert.Zero(t, s.t.Subscribers(), "Close unsubscribes")
}

// TestIncomparableSubscriptionsEnd: 1,000 limiters over one store, each
// with an observer whose type is not comparable, leave no subscriber once
// closed.
func TestIncomparableSubscriptionsEnd(t *testing.T) {
	s := NewMemoryStore()
	for range 1000 {
		l, err := New(WithStore(s), WithObserver(funcObserver(func() {})))
		require.NoError(t, err)
		require.NoError(t, l.Close(context.Background()))
	}
	assert.Zero(t, s.t.Subscribers())
}

type funcObserver func()

func (funcObserver) Decided(DecisionEvent)     {}
func (funcObserver) Reconciled(ReconcileEvent) {}
func (funcObserver) FailedOpen(FailOpenEvent)  {}
func (f funcObserver) Evicted()                { f() }

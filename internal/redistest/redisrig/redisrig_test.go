package redisrig_test

import (
	"context"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
)

// TestStoresSharePrefixes: the stores of one Stores call keep one set of
// buckets (as gateway processes on one Redis do), each Store call its own,
// and a later WithPrefix puts two Stores on one set again. One request a
// minute: a burst of 2, and no test run lasts long enough to refill one.
func TestStoresSharePrefixes(t *testing.T) {
	_, c := redisrig.Start(t)
	lim := llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1000}
	// want admits one request through s and checks the answer.
	want := func(s *redisstore.Store, allowed bool, why string) {
		t.Helper()
		d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "sk-p", Workspace: "sk-p", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != allowed {
			t.Errorf("admitted %v, want %v: %s", d.Allowed, allowed, why)
		}
	}
	ss := redisrig.Stores(t, c, 2)
	want(ss[0], true, "the burst's first")
	want(ss[1], true, "the burst's second")
	want(ss[0], false, "the burst of 2 is shared")
	want(ss[1], false, "the burst of 2 is shared")

	s := redisrig.Store(t, c)
	want(s, true, "a Store has buckets of its own")
	want(s, true, "its burst's second")
	want(s, false, "its burst spent")

	p := redisrig.Prefix()
	a, b := redisrig.Store(t, c, redisstore.WithPrefix(p)), redisrig.Store(t, c, redisstore.WithPrefix(p))
	want(a, true, "the shared burst's first")
	want(b, true, "the shared burst's second")
	want(a, false, "WithPrefix after the defaults wins")
}

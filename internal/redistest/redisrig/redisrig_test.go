package redisrig_test

import (
	"context"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStoresSharePrefixes: the stores of one Stores call keep one set of
// buckets (as gateway processes on one Redis do), each Store call its own,
// and a later WithPrefix puts two Stores on one set again. One request a
// minute: a burst of 2, and no test run lasts long enough to refill one.
func TestStoresSharePrefixes(t *testing.T) {
	_, c := redisrig.Start(t)
	lim := llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1000}
	admit := func(s *redisstore.Store) bool {
		t.Helper()
		d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: "sk-p", Workspace: "sk-p", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true})
		require.NoError(t, err)
		return d.Allowed
	}
	ss := redisrig.Stores(t, c, 2)
	assert.True(t, admit(ss[0]))
	assert.True(t, admit(ss[1]))
	assert.False(t, admit(ss[0]), "the burst of 2 is shared")
	assert.False(t, admit(ss[1]), "the burst of 2 is shared")

	s := redisrig.Store(t, c)
	assert.True(t, admit(s), "a Store has buckets of its own")
	assert.True(t, admit(s))
	assert.False(t, admit(s))

	p := redisrig.Prefix()
	a, b := redisrig.Store(t, c, redisstore.WithPrefix(p)), redisrig.Store(t, c, redisstore.WithPrefix(p))
	assert.True(t, admit(a))
	assert.True(t, admit(b))
	assert.False(t, admit(a), "WithPrefix after the defaults wins")
}

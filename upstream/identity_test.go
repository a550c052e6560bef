package upstream_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every reconcile carries the ID of its own admission and the receipt the
// store answered it with: a charge after a provider 429 on one key and a
// success on the next, and a refund after a dial error.
func TestReconcileCarriesAdmissionIdentity(t *testing.T) {
	t.Parallel()
	s := newRecordingStore(0)
	p, clk := newProvider(t), newClock()
	p.on("sk-a", tooMany("Retry-After", "5"))
	tr, err := upstream.New([]upstream.Key{bearerKey("a", "sk-a", 100, 1000), bearerKey("b", "sk-b", 100, 1000)},
		upstream.WithStore(s), upstream.WithClock(clk.Now))
	require.NoError(t, err)
	postVia(t, tr, p.srv.URL)
	assert.Equal(t, []string{"sk-a", "sk-b"}, p.creds())
	_, err = (&http.Client{Transport: tr}).Post(closedURL(t), "application/json", strings.NewReader(chat("m", 400)))
	require.Error(t, err)
	require.NoError(t, tr.Close(context.Background()))

	admits, recs := s.calls()
	require.Len(t, admits, 3, "a, b, then b again (a is skipped for 5 s)")
	require.Len(t, recs, 3)
	byID := map[string]admitted{}
	for _, a := range admits {
		require.True(t, a.d.Allowed)
		require.NotEmpty(t, a.req.ID)
		byID[a.req.ID] = a
	}
	assert.Len(t, byID, 3, "every admission has an identity of its own")
	for i, r := range recs {
		a, ok := byID[r.req.ID]
		require.True(t, ok, "reconcile %d carries an admission's ID", i)
		assert.Equal(t, a.d.Receipt, r.req.Receipt, "reconcile %d", i)
		assert.Equal(t, a.req.Workspace, r.req.Workspace, "reconcile %d: the admitting key's buckets", i)
		delete(byID, r.req.ID)
	}
	assert.False(t, recs[0].req.Refund)
	assert.Equal(t, int64(100), recs[0].req.Actual, "the provider's 429 keeps its estimate")
	assert.False(t, recs[1].req.Refund)
	assert.Equal(t, int64(15), recs[1].req.Actual)
	assert.True(t, recs[2].req.Refund, "the dial error is refunded")
}

package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type lastReconcile struct{ ev llmrate.ReconcileEvent }

func (l *lastReconcile) Decided(llmrate.DecisionEvent)       {}
func (l *lastReconcile) Reconciled(e llmrate.ReconcileEvent) { l.ev = e }
func (l *lastReconcile) FailedOpen(llmrate.FailOpenEvent)    {}
func (l *lastReconcile) Evicted()                            {}

func TestAnthropic(t *testing.T) {
	obs := &lastReconcile{}
	h, err := newHandler(llmrate.WithObserver(obs))
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	r.Header.Set("x-api-key", "sk-ant-test")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, llmrate.Usage{InputTokens: 125, OutputTokens: 15, CachedInputTokens: 100}, obs.ev.Reported, "cache reads count as input (and as CachedInputTokens); the cumulative output replaces")

	r = httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Contains(t, w.Body.String(), "missing_api_key")
}

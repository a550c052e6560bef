package llmrate_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmrate/llmrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

const secretKey = "sk-live-TOPSECRET-0123456789abcdef"

// TestRawKeyNeverLeaks: refusals (debug), fail-opens (warn), error bodies
// and headers never carry the raw key.
func TestRawKeyNeverLeaks(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	h := newHarness(t, okHandler, llmrate.WithLogger(zap.New(core)))
	var bodies []string
	for range 205 {
		w := h.send(secretKey, 0)
		bodies = append(bodies, w.Body.String(), fmt.Sprint(w.Header()))
	}
	w := h.send(secretKey, 4*400_001) // never fits
	bodies = append(bodies, w.Body.String())
	require.Positive(t, logs.FilterMessage("llmrate: refused").Len(), "refusals are logged at debug")
	rec := logs.FilterMessage("llmrate: reconciled").All()
	require.NotEmpty(t, rec, "reconciles are logged at debug, labelled")
	assert.Equal(t, "estimated", rec[0].ContextMap()["kind"])
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		assert.NotContains(t, line, secretKey)
		assert.NotContains(t, line, "TOPSECRET")
	}
	for _, b := range bodies {
		assert.NotContains(t, b, "TOPSECRET")
	}
	// faults too
	fcore, flogs := observer.New(zapcore.DebugLevel)
	fh := newHarness(t, okHandler, llmrate.WithLogger(zap.New(fcore)), llmrate.WithStore(&faultStore{mode: "panic"}))
	fh.send(secretKey, 0)
	require.Equal(t, 1, flogs.Len())
	assert.NotContains(t, fmt.Sprint(flogs.All()[0].ContextMap()), "TOPSECRET")
}

func TestRequestIDSanitized(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler)
	h.burst("sk-rid", 1000)
	for _, id := range []string{"abc-123_X.y:z", "evil\r\nSet-Cookie: a=b", "x y", strings.Repeat("a", 129), "<script>"} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", "Bearer sk-rid")
		r.Header["X-Request-Id"] = []string{id}
		w := httptest.NewRecorder()
		h.h.ServeHTTP(w, r)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		got := w.Header().Get("X-Request-Id")
		if id == "abc-123_X.y:z" {
			assert.Equal(t, id, got, "a safe id is echoed")
			continue
		}
		assert.NotEqual(t, id, got, "an unsafe id is replaced")
		assert.Regexp(t, `^req_[0-9a-f]{32}$`, got)
	}
}

// TestLimitsEndpointOwnRowOnly: a caller sees only its own workspace, even
// when it names another in the query or a header the extractor ignores.
func TestLimitsEndpointOwnRowOnly(t *testing.T) {
	t.Parallel()
	l, err := llmrate.New(
		llmrate.WithTierResolver(llmrate.StaticTiers{"ws-ent": llmrate.Enterprise, "ws-free": llmrate.Free}),
		llmrate.WithWorkspace(func(r *http.Request) (string, error) {
			k, err := llmrate.BearerToken()(r)
			return map[string]string{"sk-a": "ws-free", "sk-b": "ws-ent"}[k], err
		}))
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodGet, "/platform/v1/limits?workspace=ws-ent", nil)
	r.Header.Set("Authorization", "Bearer sk-a")
	r.Header.Set("X-Workspace", "ws-ent")
	w := httptest.NewRecorder()
	l.LimitsHandler().ServeHTTP(w, r)
	assert.Contains(t, w.Body.String(), `"tier":"free"`)
	assert.NotContains(t, w.Body.String(), "enterprise")
	assert.NotContains(t, w.Body.String(), "ws-")
}

// TestHugeAndMalformedHeaders: no panic, a clear error or the floor.
func TestHugeAndMalformedHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler)
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Authorization", "Bearer "+strings.Repeat("k", 1<<20))
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusOK, w.Code, "a long key is a key")
	for _, cl := range []int64{-1, -1 << 62, 0, 1<<63 - 1} {
		w := h.send("sk-cl", cl)
		if cl == 1<<63-1 {
			assert.Equal(t, http.StatusTooManyRequests, w.Code, "absurd length: never fits")
			assert.Equal(t, "60", w.Header().Get("Retry-After"))
			continue
		}
		assert.Equal(t, http.StatusOK, w.Code, "Content-Length %d → floor", cl)
	}
	// Through a real server, a malformed Content-Length is refused by net/http
	// before the middleware; a huge header block by MaxHeaderBytes.
	l, err := llmrate.New()
	require.NoError(t, err)
	srv := httptest.NewServer(l.Middleware(okHandler))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer sk-x")
	req.Header.Set("X-Big", strings.Repeat("a", 2<<20))
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
}

// TestHeaderWorkspaceNeedsTrust documents the danger: a header-based
// workspace extractor lets an unauthenticated client spend any workspace.
func TestHeaderWorkspaceNeedsTrust(t *testing.T) {
	t.Parallel()
	h := newHarness(t, okHandler, llmrate.WithWorkspace(llmrate.Header("X-Workspace")))
	send := func(key, ws string) int {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		r.Header.Set("X-Workspace", ws)
		w := httptest.NewRecorder()
		h.h.ServeHTTP(w, r)
		return w.Code
	}
	for range 200 {
		require.Equal(t, http.StatusOK, send("sk-attacker", "victim"))
	}
	assert.Equal(t, http.StatusTooManyRequests, send("sk-victim", "victim"), "the attacker spent the victim's workspace: only use such an extractor behind auth")
}

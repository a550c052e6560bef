package upstream_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realtime answers as a realtime API's WebSocket handshake does: 101
// Switching Protocols, then it echoes lines and holds the connection open
// until the client closes it.
func realtime(w http.ResponseWriter, _ *http.Request) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	_ = brw.Flush()
	for {
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		_, _ = brw.WriteString(line)
		_ = brw.Flush()
	}
}

// session opens a realtime session through the rig's Transport.
func (r *rig) session(t *testing.T) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, r.p.srv.URL+"/v1/realtime?model=gpt-realtime", nil)
	require.NoError(t, err)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := r.tr.RoundTrip(req)
	require.NoError(t, err)
	return resp
}

// echo writes a line on an upgraded connection and reads it back.
func echo(t *testing.T, rwc io.ReadWriteCloser, line string) {
	t.Helper()
	_, err := io.WriteString(rwc, line)
	require.NoError(t, err)
	got, err := bufio.NewReader(rwc).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, line, got)
}

// A realtime session holds its key's concurrency slot for as long as the
// upgraded connection is open, not only until the 101: with
// ConcurrentRequests 1, a second session is not sent on that key while the
// first is open, and is once the first is closed.
func TestRealtimeSessionHoldsTheKeysSlot(t *testing.T) {
	t.Parallel()
	a := bearerKey("a", "sk-a", 100, 100_000)
	a.Limits.ConcurrentRequests = 1
	r := newRig(t, []upstream.Key{a, bearerKey("b", "sk-b", 100, 100_000)})
	r.p.on("sk-a", realtime)
	r.p.on("sk-b", realtime)

	first := r.session(t)
	require.Equal(t, http.StatusSwitchingProtocols, first.StatusCode)
	conn, ok := first.Body.(io.ReadWriteCloser)
	require.True(t, ok, "the upgraded connection stays writable")
	echo(t, conn, "hello\n")
	assert.Equal(t, []string{"a:admitted"}, r.rec.outcomes())

	second := r.session(t)
	require.Equal(t, http.StatusSwitchingProtocols, second.StatusCode)
	assert.Equal(t, []string{"a:skipped_own_limit", "b:admitted"}, r.rec.outcomes(), "a's one slot is held by the open session")
	assert.Equal(t, []string{"sk-a", "sk-b"}, r.p.creds())
	require.NoError(t, second.Body.Close())

	echo(t, conn, "still open\n")
	require.NoError(t, conn.Close())
	rec := r.rec.reconciled()
	require.NotEmpty(t, rec)
	assert.Equal(t, llmrate.ReconcileEstimated, rec[0].Kind, "the session is charged its estimate")

	third := r.session(t)
	require.Equal(t, http.StatusSwitchingProtocols, third.StatusCode)
	assert.Equal(t, []string{"a:admitted"}, r.rec.outcomes(), "closed: the slot is free")
	require.NoError(t, third.Body.Close())
}

// A 101 on a key without a concurrency cap is charged its estimate at
// once, as before, and the connection is returned writable.
func TestRealtimeSessionWithoutCapSettlesAtOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t, []upstream.Key{bearerKey("a", "sk-a", 100, 100_000)})
	r.p.on("sk-a", realtime)
	s := r.session(t)
	require.Equal(t, http.StatusSwitchingProtocols, s.StatusCode)
	rec := r.rec.reconciled()
	require.Len(t, rec, 1)
	assert.Equal(t, llmrate.ReconcileEstimated, rec[0].Kind)
	conn, ok := s.Body.(io.ReadWriteCloser)
	require.True(t, ok)
	echo(t, conn, "x\n")
	require.NoError(t, conn.Close())
	assert.Empty(t, r.rec.reconciled(), "settled once")
}

// Through httputil.ReverseProxy (its upgrade path needs the 101's body to
// be an io.ReadWriteCloser): the slot is held while the client's session
// is open and freed when the client hangs up.
func TestRealtimeSessionSlotThroughReverseProxy(t *testing.T) {
	t.Parallel()
	a := bearerKey("a", "sk-a", 100, 100_000)
	a.Limits.ConcurrentRequests = 1
	r := newRig(t, []upstream.Key{a})
	r.p.on("sk-a", realtime)
	u, _ := url.Parse(r.p.srv.URL)
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, Transport: r.tr}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)

	open := func() (net.Conn, *bufio.Reader, int) {
		c, err := net.Dial("tcp", front.Listener.Addr().String())
		require.NoError(t, err)
		_, err = io.WriteString(c, "GET /v1/realtime HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		require.NoError(t, err)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		return c, br, resp.StatusCode
	}
	c1, br1, code := open()
	require.Equal(t, http.StatusSwitchingProtocols, code)
	_, err := io.WriteString(c1, "ping\n")
	require.NoError(t, err)
	line, err := br1.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ping\n", line)

	c2, _, code := open()
	assert.Equal(t, http.StatusTooManyRequests, code, "the key's one slot is held by the open session")
	require.NoError(t, c2.Close())
	assert.Equal(t, []string{"a:admitted", "a:skipped_own_limit"}, r.rec.outcomes())

	require.NoError(t, c1.Close())
	// The proxy closes its side of the upgraded connection on its own
	// goroutine once the client has hung up.
	require.Eventually(t, func() bool {
		for _, e := range r.rec.reconciled() {
			if e.Key == "a" {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
	c3, _, code := open()
	assert.Equal(t, http.StatusSwitchingProtocols, code, "the client hung up: the slot is free")
	require.NoError(t, c3.Close())
}

// A protocol upgrade (a WebSocket, as OpenAI's Realtime API uses)
// through httputil.ReverseProxy over the Transport. ReverseProxy needs the
// 101 response's Body to be an io.ReadWriteCloser (net/http's Transport
// gives one); a wrapped body that is only a ReadCloser makes the proxy
// answer 502 instead of switching protocols.
func TestUpgradeThroughReverseProxy(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want an upgrade", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		line, _ := brw.ReadString('\n') // echo one line
		_, _ = brw.WriteString(line)
		_ = brw.Flush()
	}))
	defer backend.Close()
	u, _ := url.Parse(backend.URL)

	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr, err := upstream.New([]upstream.Key{{
		Name:      "k1",
		Limits:    llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 100_000},
		Authorize: func(r *http.Request) { r.Header.Set("Authorization", "Bearer sk-1") },
	}}, upstream.WithBase(base))
	require.NoError(t, err)
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport: tr,
		ErrorLog:  nil,
	}
	front := httptest.NewServer(proxy)
	defer front.Close()

	c, err := net.Dial("tcp", front.Listener.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "GET /v1/realtime HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode, "the upgrade must pass through the Transport")
	_, err = io.WriteString(c, "ping\n")
	require.NoError(t, err)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ping\n", line)
}

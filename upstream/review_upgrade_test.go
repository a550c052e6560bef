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

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/upstream"
	"github.com/stretchr/testify/require"
)

// Review: a protocol upgrade (a WebSocket, as OpenAI's Realtime API uses)
// through httputil.ReverseProxy over the Transport. ReverseProxy needs the
// 101 response's Body to be an io.ReadWriteCloser (net/http's Transport
// gives one); a wrapped body that is only a ReadCloser makes the proxy
// answer 502 instead of switching protocols.
func TestReviewUpgradeThroughReverseProxy(t *testing.T) {
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

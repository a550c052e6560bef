package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lineServer answers each line "x" it reads with "+x\r\n" and counts the
// lines it received: a request-reply server like Redis, without Redis.
type lineServer struct {
	ln       net.Listener
	received atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func startLineServer(t *testing.T) *lineServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &lineServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					s.received.Add(1)
					if _, err := io.WriteString(c, "+"+strings.TrimSpace(line)+"\r\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func newProxy(t *testing.T, target string, seed uint64) *Proxy {
	t.Helper()
	p, err := New(target, seed)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}
}

// ask sends one request and reads its reply, waiting at most wait.
func (c *client) ask(msg string, wait time.Duration) (string, error) {
	if _, err := io.WriteString(c.c, msg+"\n"); err != nil {
		return "", err
	}
	_ = c.c.SetReadDeadline(time.Now().Add(wait))
	return c.r.ReadString('\n')
}

func TestForwards(t *testing.T) {
	s := startLineServer(t)
	p := newProxy(t, s.ln.Addr().String(), 1)
	c := dial(t, p.Addr())
	for i := range 3 {
		got, err := c.ask(fmt.Sprint("ping", i), 5*time.Second)
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("+ping%d\r\n", i), got)
	}
	st := p.Stats()
	assert.Equal(t, Stats{Conns: 1, Requests: 3, Replies: 3}, st)
	assert.True(t, strings.HasPrefix(p.Addr(), "127.0.0.1:"), p.Addr())
}

func TestRejectsBadInput(t *testing.T) {
	_, err := New("10.0.0.1:6379", 1)
	assert.ErrorContains(t, err, "not a loopback address")
	_, err = New("no-port", 1)
	assert.Error(t, err)

	s := startLineServer(t)
	p := newProxy(t, s.ln.Addr().String(), 1)
	require.NoError(t, p.Set(Faults{DropReply: 0.5}))
	err = p.Set(Faults{DropReply: 1.5, SilentReply: 2, SpikeReply: -0.1, ResetRequest: 2, ResetReply: -1, Spike: -time.Second})
	require.Error(t, err)
	for _, name := range []string{"DropReply", "SilentReply", "SpikeReply", "ResetRequest", "ResetReply", "Spike"} {
		assert.ErrorContains(t, err, name)
	}
	assert.Equal(t, Faults{DropReply: 0.5}, p.Faults(), "an invalid Set leaves the faults unchanged")
}

// A dropped reply: the server received and answered the request, the client
// reads EOF instead of the reply.
func TestDropReplyCloses(t *testing.T) {
	s := startLineServer(t)
	p := newProxy(t, s.ln.Addr().String(), 1)
	require.NoError(t, p.Set(Faults{DropReply: 1}))
	c := dial(t, p.Addr())
	got, err := c.ask("set", 5*time.Second)
	assert.ErrorIs(t, err, io.EOF)
	assert.Empty(t, got)
	assert.Equal(t, int64(1), s.received.Load(), "the server ran the request")
	assert.Equal(t, int64(1), p.Stats().Dropped)
}

// Under Hang the connection stays open and silent: the client's read times
// out (it does not see EOF), and what it sends next never reaches the
// server.
func TestDropReplyHangs(t *testing.T) {
	s := startLineServer(t)
	p := newProxy(t, s.ln.Addr().String(), 1)
	require.NoError(t, p.Set(Faults{DropReply: 1, Hang: true}))
	c := dial(t, p.Addr())
	_, err := c.ask("set", 100*time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout(), "want a timeout, got %v", err)
	_, err = c.ask("again", 100*time.Millisecond)
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout(), "want a timeout, got %v", err)
	assert.Equal(t, int64(1), s.received.Load(), "only the first request reached the server")
	assert.Equal(t, 1, p.Kill(), "the hung connection is still open")
}

// A silent reply: the server ran the request, the client's connection stays
// open and quiet (its read times out, it never sees EOF or a reset), and
// what it sends next never reaches the server; other connections are
// untouched by a SilentReply fraction of 0.
func TestSilentReply(t *testing.T) {
	s := startLineServer(t)
	p := newProxy(t, s.ln.Addr().String(), 1)
	require.NoError(t, p.Set(Faults{SilentReply: 1}))
	c := dial(t, p.Addr())
	_, err := c.ask("set", 100*time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout(), "want a timeout, got %v", err)
	_, err = c.ask("again", 100*time.Millisecond)
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout(), "want a timeout, got %v", err)
	assert.Equal(t, int64(1), s.received.Load(), "only the first request reached the server")
	st := p.Stats()
	assert.Equal(t, int64(1), st.Silenced)
	assert.Zero(t, st.Dropped, "a silent reply is not a closing drop")
	assert.Equal(t, 1, p.Kill(), "the silent connection is still open")
}

// SilenceNext silences exactly the next n replies, whichever connections
// they come on, then none: the deterministic form for tests.
func TestSilenceNext(t *testing.T) {
	s := startLineServer(t)
	p := newProxy(t, s.ln.Addr().String(), 1)
	ok := dial(t, p.Addr())
	_, err := ok.ask("warm", 5*time.Second)
	require.NoError(t, err)
	p.SilenceNext(2)
	for i := range 2 {
		c := dial(t, p.Addr())
		_, err := c.ask(fmt.Sprint("lost", i), 100*time.Millisecond)
		var ne net.Error
		require.ErrorAs(t, err, &ne, "reply %d", i)
		assert.True(t, ne.Timeout(), "want a timeout, got %v", err)
		// The client gave up waiting; the proxy silences the reply once
		// the server sends it (on a loaded machine, maybe later).
		require.Eventually(t, func() bool { return p.Stats().Silenced == int64(i+1) }, 5*time.Second, time.Millisecond)
	}
	got, err := ok.ask("after", 5*time.Second)
	require.NoError(t, err, "the count is spent: the next reply passes")
	assert.Equal(t, "+after\r\n", got)
	p.SilenceNext(1)
	p.SilenceNext(0)
	got, err = ok.ask("cancelled", 5*time.Second)
	require.NoError(t, err, "SilenceNext(0) cancels a pending count")
	assert.Equal(t, "+cancelled\r\n", got)
	assert.Equal(t, int64(2), p.Stats().Silenced)
	assert.Equal(t, int64(5), s.received.Load(), "the silenced requests reached the server")
}

func TestResetReply(t *testing.T) {
	s := startLineServer(t)
	p := newProxy(t, s.ln.Addr().String(), 1)
	require.NoError(t, p.Set(Faults{ResetReply: 1}))
	c := dial(t, p.Addr())
	_, err := c.ask("incr", 5*time.Second)
	assert.True(t, errors.Is(err, syscall.ECONNRESET), "want a reset, got %v", err)
	assert.Equal(t, int64(1), s.received.Load(), "the server ran the request")
	assert.Equal(t, int64(1), p.Stats().ResetReply)
}

func TestResetRequest(t *testing.T) {
	s := startLineServer(t)
	p := newProxy(t, s.ln.Addr().String(), 1)
	require.NoError(t, p.Set(Faults{ResetRequest: 1}))
	c := dial(t, p.Addr())
	_, err := c.ask("incr", 5*time.Second)
	assert.True(t, errors.Is(err, syscall.ECONNRESET), "want a reset, got %v", err)
	assert.Equal(t, int64(0), s.received.Load(), "the server never saw the request")
	// The faults apply to new connections and old alike; clearing them
	// lets requests through again.
	require.NoError(t, p.Set(Faults{}))
	got, err := dial(t, p.Addr()).ask("incr", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "+incr\r\n", got)
}

// A spike holds the reply at least Spike (a lower bound only: the machine
// may add to it).
func TestSpike(t *testing.T) {
	s := startLineServer(t)
	p := newProxy(t, s.ln.Addr().String(), 1)
	const spike = 150 * time.Millisecond
	require.NoError(t, p.Set(Faults{SpikeReply: 1, Spike: spike}))
	c := dial(t, p.Addr())
	start := time.Now()
	got, err := c.ask("get", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "+get\r\n", got)
	assert.GreaterOrEqual(t, time.Since(start), spike)
	assert.Equal(t, int64(1), p.Stats().Spiked)
}

// Closing the proxy ends a spike in progress: Close does not wait it out
// (goleak checks that nothing is left).
func TestCloseEndsSpike(t *testing.T) {
	s := startLineServer(t)
	p, err := New(s.ln.Addr().String(), 1)
	require.NoError(t, err)
	require.NoError(t, p.Set(Faults{SpikeReply: 1, Spike: time.Hour}))
	c := dial(t, p.Addr())
	_, err = io.WriteString(c.c, "get\n")
	require.NoError(t, err)
	for p.Stats().Spiked == 0 { // the reply is being held
		runtimeYield()
	}
	require.NoError(t, p.Close())
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.r.ReadString('\n')
	assert.ErrorIs(t, err, io.EOF)
	require.NoError(t, p.Close(), "closing twice is fine")
}

func TestPauseResume(t *testing.T) {
	s := startLineServer(t)
	p := newProxy(t, s.ln.Addr().String(), 1)
	c := dial(t, p.Addr())
	_, err := c.ask("a", 5*time.Second)
	require.NoError(t, err)

	p.Pause()
	p.Pause() // twice is fine
	_, err = c.ask("b", 5*time.Second)
	assert.Error(t, err, "the open connection was cut")
	_, err = net.Dial("tcp", p.Addr())
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "want refused while paused, got %v", err)

	require.NoError(t, p.Resume())
	require.NoError(t, p.Resume(), "resuming a running proxy does nothing")
	got, err := dial(t, p.Addr()).ask("c", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "+c\r\n", got)
	assert.Equal(t, int64(1), p.Stats().Killed)
}

// A target that is down: the client's connection is closed, and counted.
func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	target := ln.Addr().String()
	require.NoError(t, ln.Close())
	p := newProxy(t, target, 1)
	c := dial(t, p.Addr())
	_, err = c.ask("x", 5*time.Second)
	assert.Error(t, err)
	for p.Stats().DialErrors == 0 {
		runtimeYield()
	}
	assert.Equal(t, int64(0), p.Stats().Conns)
}

// Decisions depend on the seed, the connection's number and the read's
// number only: two proxies with one seed drop the same replies of their
// first connection; the fraction dropped is near the one asked.
func TestDecisionsSeeded(t *testing.T) {
	pattern := func(seed uint64) string {
		var b strings.Builder
		for seq := range uint64(2000) {
			if draws(seed, kindDrop, 1, seq+1, 0.25) {
				b.WriteByte('x')
			} else {
				b.WriteByte('.')
			}
		}
		return b.String()
	}
	a, b, other := pattern(7), pattern(7), pattern(8)
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, other)
	n := strings.Count(a, "x")
	assert.InDelta(t, 500, n, 75, "dropped %d of 2000 at 0.25", n)

	// Through the proxy: the same seed drops the same request of a
	// connection's sequence (each drop closes it, so one reply each).
	run := func(seed uint64) []bool {
		s := startLineServer(t)
		p := newProxy(t, s.ln.Addr().String(), seed)
		require.NoError(t, p.Set(Faults{DropReply: 0.5}))
		c := dial(t, p.Addr())
		var got []bool
		for i := range 12 {
			_, err := c.ask(fmt.Sprint("q", i), 5*time.Second)
			got = append(got, err == nil)
			if err != nil {
				break
			}
		}
		return got
	}
	first := run(3)
	assert.Equal(t, first, run(3))
	for seq, ok := range first {
		assert.Equal(t, !draws(3, kindDrop, 1, uint64(seq+1), 0.5), ok, "reply %d", seq+1)
	}
}

func runtimeYield() { runtime.Gosched() }

// Package faultproxy is a TCP proxy on the loopback interface that injects
// the faults a network and a server inflict on a client: replies lost after
// the server received (and ran) the request, with the connection closed or
// left open and silent (a dead link, a stalled peer, a middlebox that
// blackholes), latency spikes, connection resets, and pauses during which
// nothing connects and every connection is cut.
//
// The proxy knows nothing of the protocol it carries. A request is one read
// from the client and a reply one read from the server (up to 64 KiB): for
// a request-reply protocol such as Redis's, without pipelining, that is one
// command and its reply. Each fault is decided per connection and per
// read, from a hash of the seed, the connection's number (in accept order)
// and the read's number on that connection: the same seed gives every
// connection the same sequence of decisions, whatever the timing of the
// others. Which connection gets which number depends on the order clients
// connect in.
//
// It is for tests and benchmarks: it listens on 127.0.0.1 only and proxies
// only to a loopback address.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Faults are the faults the proxy injects. The zero value injects none.
// Fractions are in [0, 1]; each applies independently to every request or
// reply.
type Faults struct {
	// DropReply is the fraction of replies the proxy swallows after the
	// server sent them (so the server ran the request): the client never
	// sees that reply. The connection is then closed (the client reads
	// EOF), or hung when Hang is set.
	DropReply float64
	// Hang makes a dropped reply hang its connection instead of closing
	// it: the client's side stays open, nothing more reaches either end
	// (later requests are read and discarded), until the client closes it
	// or the proxy kills it.
	Hang bool
	// SilentReply is the fraction of replies the proxy discards after the
	// server sent them, leaving the connection open and silent: no close,
	// no reset, nothing more reaches either end (later requests are read
	// and discarded) until the client closes it or the proxy kills it. It
	// is DropReply with Hang, drawn on its own, so that one set of faults
	// can both close and silence connections.
	SilentReply float64
	// SpikeReply is the fraction of replies held for Spike before they are
	// forwarded (later replies on that connection wait behind it).
	SpikeReply float64
	Spike      time.Duration
	// ResetRequest is the fraction of requests answered by a reset (RST)
	// of the client's connection instead of being forwarded: the server
	// never sees them.
	ResetRequest float64
	// ResetReply is the fraction of replies replaced by a reset (RST) of
	// the client's connection: the server ran the request, the client
	// reads "connection reset by peer".
	ResetReply float64
}

func (f Faults) validate() error {
	var errs []error
	for _, v := range []struct {
		name string
		x    float64
	}{{"DropReply", f.DropReply}, {"SilentReply", f.SilentReply}, {"SpikeReply", f.SpikeReply}, {"ResetRequest", f.ResetRequest}, {"ResetReply", f.ResetReply}} {
		if !(v.x >= 0 && v.x <= 1) {
			errs = append(errs, fmt.Errorf("faultproxy: %s %v, want a fraction in [0, 1]", v.name, v.x))
		}
	}
	if f.Spike < 0 {
		errs = append(errs, fmt.Errorf("faultproxy: Spike %v, must not be negative", f.Spike))
	}
	return errors.Join(errs...)
}

// Stats counts what the proxy did since it started.
type Stats struct {
	Conns        int64 // client connections accepted and connected to the server
	DialErrors   int64 // client connections closed because the server could not be reached
	Refused      int64 // client connections closed at once because the proxy was paused
	Requests     int64 // requests forwarded (or being forwarded) to the server
	Replies      int64 // replies forwarded (or being forwarded) to the client
	Dropped      int64 // replies swallowed (DropReply)
	Silenced     int64 // replies discarded, their connections left open and silent (SilentReply, SilenceNext)
	Spiked       int64 // replies held (SpikeReply)
	ResetRequest int64 // connections reset instead of forwarding a request
	ResetReply   int64 // connections reset instead of forwarding a reply
	Killed       int64 // connections reset by Kill or Pause
}

type stats struct {
	conns, dialErrors, refused, requests, replies, dropped, silenced, spiked, resetRequest, resetReply, killed atomic.Int64
}

// Proxy forwards connections from its loopback address to a target,
// injecting Faults. It is safe for concurrent use.
type Proxy struct {
	target string
	seed   uint64
	addr   string

	mu     sync.Mutex
	ln     net.Listener // nil while paused or closed
	faults Faults
	conns  map[*conn]struct{}
	closed bool
	nextID uint64
	silent int // replies still to silence (SilenceNext)

	wg sync.WaitGroup // the accept loop and every connection's goroutines
	st stats
}

// New starts a proxy on a free port of 127.0.0.1 that forwards to target,
// a loopback host:port, with no faults until Set. seed fixes the faults'
// decisions (see the package doc).
func New(target string, seed uint64) (*Proxy, error) {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("faultproxy: target %q is not a loopback address", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{target: target, seed: seed, addr: ln.Addr().String(), ln: ln, conns: map[*conn]struct{}{}}
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// Addr returns the proxy's address, host:port on 127.0.0.1. It stays the
// same across Pause and Resume.
func (p *Proxy) Addr() string { return p.addr }

// Set replaces the faults; connections already open use the new ones from
// their next read. An invalid fraction or a negative Spike is an error, and
// the faults are then unchanged.
func (p *Proxy) Set(f Faults) error {
	if err := f.validate(); err != nil {
		return err
	}
	p.mu.Lock()
	p.faults = f
	p.mu.Unlock()
	return nil
}

// Faults returns the faults in force.
func (p *Proxy) Faults() Faults {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults
}

// SilenceNext makes the proxy discard the next n replies it reads from the
// server, on whichever connections they come, as SilentReply does: each
// one's connection is left open and silent. It is the deterministic form
// of SilentReply, for tests: n replaces any count still pending, and 0
// cancels it.
func (p *Proxy) SilenceNext(n int) {
	p.mu.Lock()
	p.silent = max(0, n)
	p.mu.Unlock()
}

// takeSilent reports whether the reply just read is one SilenceNext asked
// to discard, counting it down.
func (p *Proxy) takeSilent() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.silent == 0 {
		return false
	}
	p.silent--
	return true
}

// Stats returns what the proxy did so far.
func (p *Proxy) Stats() Stats {
	s := &p.st
	return Stats{Conns: s.conns.Load(), DialErrors: s.dialErrors.Load(), Refused: s.refused.Load(), Requests: s.requests.Load(),
		Replies: s.replies.Load(), Dropped: s.dropped.Load(), Silenced: s.silenced.Load(), Spiked: s.spiked.Load(), ResetRequest: s.resetRequest.Load(),
		ResetReply: s.resetReply.Load(), Killed: s.killed.Load()}
}

// Kill resets every open connection (RST to the client, close to the
// server) and returns how many it reset. New connections are accepted as
// before.
func (p *Proxy) Kill() int {
	p.mu.Lock()
	cs := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.reset()
	}
	p.st.killed.Add(int64(len(cs)))
	return len(cs)
}

// Pause stops listening (a client connecting meanwhile is refused) and
// resets every open connection, as a server that went away would. Pausing
// twice is fine.
func (p *Proxy) Pause() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	p.Kill()
}

// Resume listens again on the same address after Pause. It is an error
// when the proxy is closed or the address was taken meanwhile; resuming a
// proxy that is not paused does nothing.
func (p *Proxy) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("faultproxy: closed")
	}
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("faultproxy: resume on %s: %w", p.addr, err)
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// Close stops the proxy, closes every connection and waits for its
// goroutines. Closing twice is fine.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ln := p.ln
	p.ln = nil
	cs := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, c := range cs {
		c.close()
	}
	p.wg.Wait()
	return nil
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		cc, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed (Pause or Close)
		}
		p.wg.Add(1)
		go p.serve(ln, cc)
	}
}

// serve connects one client to the target and starts its two pumps.
func (p *Proxy) serve(ln net.Listener, cc net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	live := !p.closed && p.ln == ln
	p.mu.Unlock()
	if !live { // accepted just as the proxy paused
		p.st.refused.Add(1)
		_ = cc.Close()
		return
	}
	sc, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		p.st.dialErrors.Add(1)
		_ = cc.Close()
		return
	}
	p.mu.Lock()
	if p.closed || p.ln != ln {
		p.mu.Unlock()
		p.st.refused.Add(1)
		_ = cc.Close()
		_ = sc.Close()
		return
	}
	p.nextID++
	c := &conn{p: p, id: p.nextID, client: cc, server: sc, done: make(chan struct{})}
	p.conns[c] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	p.st.conns.Add(1)
	go c.up()
	go c.down()
}

// Decision kinds: each fault draws from its own sequence.
const (
	kindResetRequest uint64 = iota + 1
	kindResetReply
	kindDrop
	kindSpike
	kindSilent
)

// draws reports whether the seq-th read of connection id, for fault kind,
// falls within fraction: a hash of (seed, kind, id, seq) taken as a
// uniform number in [0, 1).
func draws(seed, kind, id, seq uint64, fraction float64) bool {
	if fraction <= 0 {
		return false
	}
	if fraction >= 1 {
		return true
	}
	h := mix(seed ^ mix(kind<<56^id<<24^seq))
	return float64(h>>11)/(1<<53) < fraction
}

// mix is splitmix64's finaliser: a bijection on 64 bits whose every output
// bit depends on every input bit.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// conn is one proxied connection.
type conn struct {
	p              *Proxy
	id             uint64
	client, server net.Conn
	done           chan struct{} // closed with the connection: ends a spike early
	once           sync.Once
	hung           atomic.Bool // a reply was silenced (SilentReply, SilenceNext, Hang): discard everything
}

const bufSize = 64 << 10

// up forwards requests from the client to the server.
func (c *conn) up() {
	defer c.p.wg.Done()
	defer c.close()
	buf := make([]byte, bufSize)
	for seq := uint64(1); ; seq++ {
		n, err := c.client.Read(buf)
		if n > 0 && !c.hung.Load() {
			f := c.p.Faults()
			if draws(c.p.seed, kindResetRequest, c.id, seq, f.ResetRequest) {
				c.p.st.resetRequest.Add(1)
				c.reset()
				return
			}
			c.p.st.requests.Add(1) // before the write: the server may answer before it returns
			if _, werr := c.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// down forwards replies from the server to the client.
func (c *conn) down() {
	defer c.p.wg.Done()
	buf := make([]byte, bufSize)
	for seq := uint64(1); ; seq++ {
		n, err := c.server.Read(buf)
		if n > 0 {
			f := c.p.Faults()
			switch {
			case draws(c.p.seed, kindResetReply, c.id, seq, f.ResetReply):
				c.p.st.resetReply.Add(1)
				c.reset()
				return
			case c.p.takeSilent() || draws(c.p.seed, kindSilent, c.id, seq, f.SilentReply):
				c.p.st.silenced.Add(1)
				c.silence()
				return
			case draws(c.p.seed, kindDrop, c.id, seq, f.DropReply):
				c.p.st.dropped.Add(1)
				if f.Hang {
					c.silence()
					return
				}
				c.close()
				return
			case draws(c.p.seed, kindSpike, c.id, seq, f.SpikeReply) && f.Spike > 0:
				c.p.st.spiked.Add(1)
				t := time.NewTimer(f.Spike)
				select {
				case <-t.C:
				case <-c.done:
					t.Stop()
					return
				}
			}
			c.p.st.replies.Add(1) // before the write: the client may act on it before it returns
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				c.close()
				return
			}
		}
		if err != nil {
			if !c.hung.Load() {
				c.close()
			}
			return
		}
	}
}

// silence leaves the client's side open and quiet: up discards what it
// sends until the client or the proxy closes it.
func (c *conn) silence() {
	c.hung.Store(true)
	_ = c.server.Close()
}

// close closes both ends (the client reads EOF) and forgets the
// connection. It is safe to call more than once.
func (c *conn) close() {
	c.once.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.server.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// reset closes the client's end with a reset (RST: SO_LINGER 0) and the
// server's end as usual.
func (c *conn) reset() {
	if tc, ok := c.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.close()
}

var _ io.Closer = (*Proxy)(nil)

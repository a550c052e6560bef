package upstream

import (
	"io"
	"net/http"
	"sync"
)

// holdUpgrade makes resp's body, the connection a 101 Switching Protocols
// response upgraded (a WebSocket, such as a realtime API), settle res when
// it is closed: the key's concurrency slot is held for as long as the
// session is open. The body stays an io.ReadWriteCloser when the base
// returned one, as httputil.ReverseProxy's upgrade path needs.
func holdUpgrade(resp *http.Response, res *reservation) {
	u := &upgraded{res: res}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
		resp.Body = &upgradedConn{ReadWriteCloser: rwc, upgraded: u}
		return
	}
	resp.Body = &upgradedBody{ReadCloser: resp.Body, upgraded: u}
}

// upgraded settles its reservation once, at the first close.
type upgraded struct {
	res  *reservation
	once sync.Once
}

func (u *upgraded) closed() { u.once.Do(u.res.settleUpgrade) }

// upgradedConn is a writable upgraded connection.
type upgradedConn struct {
	io.ReadWriteCloser
	*upgraded
}

// Close closes the connection and settles the reservation.
func (c *upgradedConn) Close() error {
	err := c.ReadWriteCloser.Close()
	c.closed()
	return err
}

// upgradedBody is an upgraded connection the base returned read-only.
type upgradedBody struct {
	io.ReadCloser
	*upgraded
}

// Close closes the body and settles the reservation.
func (b *upgradedBody) Close() error {
	err := b.ReadCloser.Close()
	b.closed()
	return err
}

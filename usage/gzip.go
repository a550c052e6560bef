package usage

import (
	"compress/gzip"
	"io"
)

// gzipDecoder inflates a gzip body for scanning only. compress/gzip reads
// (pulls) while the body arrives in writes (pushes), so writes are handed
// to a goroutine through a synchronous pipe: no compressed bytes are held
// beyond the decompressor's own window. The goroutine starts at the first
// write; close joins it.
type gzipDecoder struct {
	to   *Scanner
	pw   *io.PipeWriter
	done chan struct{}
}

func (g *gzipDecoder) start() {
	pr, pw := io.Pipe()
	g.pw, g.done = pw, make(chan struct{})
	go func() {
		defer close(g.done)
		defer pr.Close() // unblocks the writer if inflating stops early
		zr, err := gzip.NewReader(pr)
		if err != nil {
			return
		}
		buf := make([]byte, 16<<10)
		for {
			n, err := zr.Read(buf)
			g.to.feed(buf[:n])
			if err != nil {
				return
			}
		}
	}()
}

func (g *gzipDecoder) write(p []byte) {
	if g.pw == nil {
		g.start()
	}
	_, _ = g.pw.Write(p)
}

func (g *gzipDecoder) close() error {
	if g.pw == nil {
		return nil
	}
	_ = g.pw.Close()
	<-g.done
	g.pw = nil
	return nil
}

package usage

import "bytes"

// maxHeldEvent bounds the bytes a Filter holds back while an event is
// incomplete; a longer event is passed through as it comes.
const maxHeldEvent = 64 << 10

// Filter forwards an SSE body to a writer event by event, dropping OpenAI's
// usage-only chunk (an event whose data is an object with "choices": [] and
// a usage object): a gateway that asked the upstream for usage on a client's
// behalf hides that chunk from the client. Every byte also goes to the
// Filter's Scanner, once, which decides what each event is: SSE is parsed
// in one place. Complete events go out in the same Write that completes
// them; only an incomplete event's bytes are held, up to 64 KiB; a longer
// event is passed through, never dropped.
//
// Its work is linear in the bytes written, whatever the writes' sizes: each
// byte is searched for an event's end once (the search resumes where the
// last write left it, never from the held event's start), and held bytes
// are copied once, into the held buffer.
//
// A Filter drops nothing when its Scanner has a Content-Encoding to decode.
// The zero value is ready after Reset.
type Filter struct {
	s       *Scanner
	out     func([]byte) (int, error)
	held    []byte
	ends    endSearch // the search for the end of the event being held or passed
	passing bool      // an oversized event is being passed through to its end
}

// Reset readies f to feed s and forward to out, keeping its buffer unless
// it grew past twice the hold bound (a huge incomplete write was once held:
// a pooled Filter must not keep that allocated).
func (f *Filter) Reset(s *Scanner, out func([]byte) (int, error)) {
	f.s, f.out = s, out
	f.release()
	f.passing = false
	f.ends = endSearch{}
}

// release empties the held buffer, dropping it if it grew large.
func (f *Filter) release() {
	if cap(f.held) > 2*maxHeldEvent {
		f.held = nil
	}
	f.held = f.held[:0]
}

// Write scans b and forwards what can be forwarded; the error is out's.
func (f *Filter) Write(b []byte) (int, error) {
	n := len(b)
	if f.passing {
		end := f.ends.next(b)
		if end < 0 {
			if err := f.pass(b); err != nil {
				return 0, err
			}
			return n, nil
		}
		f.passing = false
		if err := f.pass(b[:end]); err != nil {
			return 0, err
		}
		b = b[end:]
	}
	if len(f.held) > 0 {
		end := f.ends.next(b)
		switch {
		case end < 0 && len(f.held)+len(b) <= maxHeldEvent:
			f.held = append(f.held, b...)
			return n, nil
		case end < 0: // the event outgrew the bound: passed through to its end
			f.passing = true
			err := f.pass(f.held)
			f.release()
			if err == nil {
				err = f.pass(b)
			}
			if err != nil {
				return 0, err
			}
			return n, nil
		case len(f.held)+end > maxHeldEvent: // complete, but over the bound: passed through
			err := f.pass(f.held)
			f.release()
			if err == nil {
				err = f.pass(b[:end])
			}
			if err != nil {
				return 0, err
			}
		default:
			f.held = append(f.held, b[:end]...)
			err := f.event(f.held)
			f.release()
			if err != nil {
				return 0, err
			}
		}
		b = b[end:]
	}
	for len(b) > 0 {
		end := f.ends.next(b)
		if end < 0 {
			break
		}
		if err := f.event(b[:end]); err != nil {
			return 0, err
		}
		b = b[end:]
	}
	switch {
	case len(b) == 0:
	case len(b) > maxHeldEvent:
		f.passing = true
		if err := f.pass(b); err != nil {
			return 0, err
		}
	default:
		f.held = append(f.held, b...)
	}
	return n, nil
}

// event scans one complete event and forwards it unless it is the
// usage-only chunk.
func (f *Filter) event(ev []byte) error {
	if f.s.writeEvent(ev) {
		return nil
	}
	_, err := f.out(ev)
	return err
}

func (f *Filter) pass(b []byte) error {
	_, _ = f.s.Write(b)
	_, err := f.out(b)
	return err
}

// Flush forwards whatever is still held (a stream that ended mid-event).
func (f *Filter) Flush() error {
	var err error
	if len(f.held) > 0 {
		err = f.pass(f.held)
	}
	f.release()
	f.passing = false
	f.ends = endSearch{}
	return err
}

// endSearch finds where an SSE event ends (the empty line that ends it, as
// eventEnd does) across writes: it resumes where the last write left off,
// so each byte is searched once. The zero value is at an event's start.
type endSearch struct {
	midLine bool // the bytes seen so far end inside a non-empty line
	cr      bool // ...or with a CR that ended a line: a LF next belongs to it
	crEnds  bool // that CR ended an empty line: the event ends with it
}

// next consumes b and returns the length of b's part of the event, through
// the empty line that ends it (the search then restarts at the next
// event), or -1 when the event goes on past b.
func (e *endSearch) next(b []byte) int {
	i := 0
	if e.cr {
		if len(b) == 0 {
			return -1
		}
		if b[0] == '\n' {
			i = 1
		}
		if e.crEnds {
			*e = endSearch{}
			return i
		}
		e.cr = false
	}
	lf := -1 // the next LF at or after i; len(b): none
	for i < len(b) {
		if !e.midLine {
			switch b[i] {
			case '\n':
				*e = endSearch{}
				return i + 1
			case '\r':
				if i+1 == len(b) {
					e.cr, e.crEnds = true, true
					return -1
				}
				end := i + 1
				if b[end] == '\n' {
					end++
				}
				*e = endSearch{}
				return end
			}
			e.midLine = true
		}
		if lf < i {
			lf = len(b)
			if j := bytes.IndexByte(b[i:], '\n'); j >= 0 {
				lf = i + j
			}
		}
		if k := bytes.IndexByte(b[i:lf], '\r'); k >= 0 { // the line ends at a CR
			i += k + 1
			e.midLine = false
			if i == len(b) {
				e.cr = true
				return -1
			}
			if b[i] == '\n' {
				i++
			}
			continue
		}
		if lf == len(b) {
			return -1
		}
		i = lf + 1
		e.midLine = false
	}
	return -1
}

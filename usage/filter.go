package usage

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
// A Filter drops nothing when its Scanner has a Content-Encoding to decode.
// The zero value is ready after Reset.
type Filter struct {
	s       *Scanner
	out     func([]byte) (int, error)
	held    []byte
	passing bool // an oversized event is being passed through to its end
}

// Reset readies f to feed s and forward to out, keeping its buffer unless
// it grew past twice the hold bound (a huge incomplete write was once held:
// a pooled Filter must not keep that allocated).
func (f *Filter) Reset(s *Scanner, out func([]byte) (int, error)) {
	f.s, f.out = s, out
	f.release()
	f.passing = false
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
		end := fastEventEnd(b)
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
	for len(b) > 0 && len(f.held) == 0 {
		end := fastEventEnd(b)
		if end < 0 {
			break
		}
		if err := f.event(b[:end]); err != nil {
			return 0, err
		}
		b = b[end:]
	}
	if len(b) == 0 {
		return n, nil
	}
	f.held = append(f.held, b...)
	for {
		end := fastEventEnd(f.held)
		if end < 0 {
			break
		}
		if err := f.event(f.held[:end]); err != nil {
			return 0, err
		}
		f.held = append(f.held[:0], f.held[end:]...)
	}
	if len(f.held) > maxHeldEvent {
		f.passing = true
		err := f.pass(f.held)
		f.release()
		if err != nil {
			return 0, err
		}
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
	return err
}

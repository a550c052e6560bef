package usage

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// This file reads AWS event streams (Content-Type
// application/vnd.amazon.eventstream), as Amazon Bedrock's ConverseStream
// and InvokeModelWithResponseStream send them, and turns their events into
// the JSON documents the usage scanner reads.
//
// Framing (one message):
//
//	total length   uint32, big-endian, the whole message
//	headers length uint32
//	prelude CRC    CRC-32 (IEEE) of the 8 bytes above
//	headers        name, type, value; :message-type, :event-type, ...
//	payload        total - headers - 16 bytes
//	message CRC    CRC-32 of everything before it
//
// Bytes are accumulated until one whole message is held, which is then
// decoded, with both CRCs checked, by the AWS SDK's eventstream.Decoder.
// A message longer than maxEventMessage (1 MiB) is refused, so one stream
// holds at most: the message being assembled (1 MiB), the SDK's payload
// buffer (1 MiB) and, for an InvokeModel chunk, its base64-decoded bytes
// (768 KiB). Real Bedrock messages are a few hundred bytes; the buffers
// grow only to the largest message seen.

const (
	// maxEventMessage is the largest event-stream message accepted (1 MiB).
	maxEventMessage = 1 << 20

	esPreludeLen = 12 // total length, headers length, prelude CRC
	esMinMessage = 16 // prelude and message CRC, no headers, no payload
	esCoding     = "application/vnd.amazon.eventstream"
)

// The event-stream headers read here.
const (
	esMessageType   = ":message-type"   // "event", "exception" or "error"
	esEventType     = ":event-type"     // e.g. "contentBlockDelta", "metadata", "chunk"
	esExceptionType = ":exception-type" // e.g. "throttlingException"
	esErrorCode     = ":error-code"
)

// eventStreamFeed decodes an AWS event stream pushed to it in writes of any
// size and hands each event's JSON document to doc:
//
//   - messages whose :message-type is "exception" or "error" are never
//     documents (so never usage); the first one's type is kept, see
//     exception;
//   - an InvokeModelWithResponseStream "chunk" event's payload is
//     {"bytes":"<base64>"}: the decoded bytes (the model's own event, e.g.
//     an Anthropic messages event) are the document;
//   - any other event's payload (ConverseStream messageStart,
//     contentBlockDelta, metadata, ...) is the document as it is.
//
// doc must not keep the slice it is given. The bytes written are only
// read, and not retained once write returns (a partial message is copied).
// A feed is used by one goroutine at a time.
type eventStreamFeed struct {
	doc func(payload []byte)
	dec *eventstream.Decoder
	rd  bytes.Reader

	buf     []byte // the message being assembled
	need    int    // its total length once its prelude is in buf, else 0
	payload []byte // the SDK decoder's payload buffer, reused

	err       *DecodeError
	exception string
	messages  int
}

// newEventStreamFeed returns a feed handing each event's document to doc.
func newEventStreamFeed(doc func(payload []byte)) *eventStreamFeed {
	return &eventStreamFeed{doc: doc, dec: eventstream.NewDecoder()}
}

// reset makes f ready for a new stream, keeping its buffers.
func (f *eventStreamFeed) reset(doc func(payload []byte)) {
	f.doc = doc
	f.buf, f.need = f.buf[:0], 0
	f.err, f.exception, f.messages = nil, "", 0
}

// write feeds the next bytes of the stream. After a corrupt message (see
// failure) the rest of the stream is ignored.
func (f *eventStreamFeed) write(p []byte) {
	for len(p) > 0 && f.err == nil {
		if len(f.buf) == 0 && len(p) >= esPreludeLen {
			// Nothing held: whole messages are decoded where they lie.
			n, err := f.prelude(p)
			if err != nil {
				f.fail(err)
				return
			}
			if n <= len(p) {
				f.message(p[:n])
				p = p[n:]
				continue
			}
		}
		want := esPreludeLen
		if f.need > 0 {
			want = f.need
		}
		k := min(want-len(f.buf), len(p))
		f.buf = append(f.buf, p[:k]...)
		p = p[k:]
		if f.need == 0 && len(f.buf) == esPreludeLen {
			n, err := f.prelude(f.buf)
			if err != nil {
				f.fail(err)
				return
			}
			f.need = n
			if cap(f.buf) < n {
				f.buf = append(make([]byte, 0, n), f.buf...)
			}
		}
		if f.need > 0 && len(f.buf) == f.need {
			f.message(f.buf)
			f.buf, f.need = f.buf[:0], 0
		}
	}
}

// prelude checks a message's first 12 bytes and returns its total length.
// The prelude CRC is checked here, before the length is trusted to size a
// buffer; the SDK checks it again with the message CRC.
func (f *eventStreamFeed) prelude(b []byte) (int, error) {
	total := binary.BigEndian.Uint32(b[0:4])
	headers := binary.BigEndian.Uint32(b[4:8])
	if crc32.ChecksumIEEE(b[:8]) != binary.BigEndian.Uint32(b[8:12]) {
		return 0, errors.New("prelude CRC mismatch")
	}
	if total < esMinMessage || headers > total-esMinMessage {
		return 0, fmt.Errorf("message length %d with %d header bytes", total, headers)
	}
	if total > maxEventMessage {
		return 0, errEventTooLarge
	}
	return int(total), nil
}

var errEventTooLarge = errors.New("message above 1 MiB")

// message decodes one whole message and dispatches it.
func (f *eventStreamFeed) message(b []byte) {
	f.rd.Reset(b)
	m, err := f.dec.Decode(&f.rd, f.payload[:0])
	f.rd.Reset(nil)
	if err != nil {
		f.fail(err)
		return
	}
	f.messages++
	if cap(m.Payload) > cap(f.payload) {
		f.payload = m.Payload[:0]
	}
	switch headerString(m.Headers, esMessageType) {
	case "event":
		if headerString(m.Headers, esEventType) == "chunk" {
			f.chunk(m.Payload)
		} else if len(m.Payload) > 0 {
			f.doc(m.Payload)
		}
	case "exception":
		f.setException(headerString(m.Headers, esExceptionType), "exception")
	case "error":
		f.setException(headerString(m.Headers, esErrorCode), "error")
	}
}

func (f *eventStreamFeed) setException(name, fallback string) {
	if f.exception != "" {
		return
	}
	if name == "" {
		name = fallback
	}
	f.exception = name
}

// chunk hands on the document inside an InvokeModelWithResponseStream
// chunk, {"bytes":"<base64>","p":"<padding>"}. A chunk that is not that
// shape holds no document.
func (f *eventStreamFeed) chunk(payload []byte) {
	var c struct {
		Bytes []byte `json:"bytes"` // encoding/json decodes base64
	}
	if json.Unmarshal(payload, &c) != nil || len(c.Bytes) == 0 {
		return
	}
	f.doc(c.Bytes)
}

func headerString(hs eventstream.Headers, name string) string {
	if v, ok := hs.Get(name).(eventstream.StringValue); ok {
		return string(v)
	}
	return ""
}

func (f *eventStreamFeed) fail(err error) {
	reason := DecodeCorrupt
	if errors.Is(err, errEventTooLarge) {
		reason = DecodeMessageTooLarge
	}
	f.err = &DecodeError{Coding: esCoding, Reason: reason, Err: err}
	f.buf, f.need = f.buf[:0], 0
}

// close ends the stream. It returns the same as failure.
func (f *eventStreamFeed) close() error { return f.failure() }

// pending reports whether the stream so far ends inside a message: bytes
// of a message that is not complete are held. At the end of the body it
// means the stream was cut mid-message; that message counts nothing.
func (f *eventStreamFeed) pending() bool { return len(f.buf) > 0 }

// failure returns nil, or a *DecodeError if a message was corrupt (a CRC
// mismatch, impossible lengths, headers the SDK cannot read) or longer
// than 1 MiB. Documents handed on before it stand.
func (f *eventStreamFeed) failure() error {
	if f.err == nil {
		return nil
	}
	return f.err
}

// exceptionType returns the :exception-type (or :error-code) of the first
// exception or error message in the stream, "exception" or "error" if it
// had none, and "" if there was no such message. A stream with one did
// not complete.
func (f *eventStreamFeed) exceptionType() string { return f.exception }

package usage

import "bytes"

// feedNDJSON processes application/x-ndjson bytes: every LF-terminated line
// is one document; blank lines are skipped.
func (s *Scanner) feedNDJSON(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.lineLen += int64(len(p))
			s.js.write(p)
			return
		}
		s.js.write(p[:i])
		if s.lineLen+int64(i) > 0 {
			s.js.end()
		}
		s.lineLen = 0
		p = p[i+1:]
	}
}

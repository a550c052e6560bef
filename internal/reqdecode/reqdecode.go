// Package reqdecode lends the middleware the response side's bounded
// decoders (package usage) for reading a request body sent with a
// Content-Encoding: the usage package sets Open when it is initialized,
// so the decoders stay where the Scanner uses them and no public name is
// added for them.
package reqdecode

import "io"

// Open returns src decoded as contentEncoding (a Content-Encoding header
// value) says, with the decoders and limits the usage Scanner uses, and a
// function to call once done reading (it returns the decoder's resources).
// The reader returns io.EOF where the encoded stream ends and an error
// where it is corrupt or truncated. An unsupported coding or a chain is an
// error and no reader. Set by package usage's init.
var Open func(contentEncoding string, src io.Reader) (r io.Reader, done func(), err error)

package redisstore

import "time"

// SawServer makes the store believe the server's time was t just now, as a
// reply would (quota.go's estimate of the server's clock).
func (s *Store) SawServer(t time.Time) { s.sawServer(t.UnixMicro()) }

// ErrSkew is the error of an admission failed open for skew.
var ErrSkew = errSkew

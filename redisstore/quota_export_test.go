package redisstore

import "time"

// SawServer makes the store believe the server's time was t just now, as a
// reply would (quota.go's estimate of the server's clock).
func (s *Store) SawServer(t time.Time) { s.sawServer(t.UnixMicro()) }

// ErrSkew is the error of an admission failed open for skew.
var ErrSkew = errSkew

// ReceiptInstant returns the server's instant a quota admission's receipt
// holds (the zero time for none).
func ReceiptInstant(receipt string) time.Time {
	us := receiptInstant(receipt)
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

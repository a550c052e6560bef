package redisstore

import (
	"context"
	"time"
)

// ReturnIdleLeases runs the returner's pass now: every lease last used
// before idleSince goes back to Redis (every lease for the zero time).
func (s *Store) ReturnIdleLeases(ctx context.Context, idleSince time.Time) error {
	return s.returnLeases(ctx, idleSince)
}

// Leased is the number of admissions decided on a lease.
func (s *Store) Leased() int { return int(s.leases.local.Load()) }

package main

import (
	"reflect"
	"sync/atomic"
	"unsafe"

	"github.com/llmrate/llmrate/redisstore"
)

// internals are two of a redisstore.Store's unexported counters, read for
// the attribution only (never written): when its breaker lets Redis be
// tried again (downUntil, unix ns), and how many admissions it decided on
// a lease (leases.local). An admission or reconcile that sent nothing to
// Redis was decided on a lease or by the fallback, and nothing exported
// tells which. Either is nil when the store no longer has it under that
// name and type; the probe then tracks the breaker from the replies it
// sees, which is approximate (see probe).
type internals struct {
	downUntil  *atomic.Int64
	leaseLocal *atomic.Int64
}

func readInternals(s *redisstore.Store) internals {
	var in internals
	v := reflect.ValueOf(s).Elem()
	in.downUntil = int64Field(v, "downUntil")
	if l := v.FieldByName("leases"); l.IsValid() && l.Kind() == reflect.Pointer && !l.IsNil() && l.Elem().Kind() == reflect.Struct {
		in.leaseLocal = int64Field(l.Elem(), "local")
	}
	return in
}

// int64Field returns a pointer to struct v's atomic.Int64 field name, nil
// when there is none.
func int64Field(v reflect.Value, name string) *atomic.Int64 {
	f := v.FieldByName(name)
	if !f.IsValid() || f.Type() != reflect.TypeFor[atomic.Int64]() || !f.CanAddr() {
		return nil
	}
	return (*atomic.Int64)(unsafe.Pointer(f.UnsafeAddr()))
}

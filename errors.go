package llmrate

import (
	"errors"
	"fmt"
)

// Sentinel errors, for errors.Is.
var (
	// ErrNoKey is returned by an Extractor when the request carries no API
	// key (Header and BearerToken return it). The middleware answers such a
	// request 401 with code "missing_api_key".
	ErrNoKey = errors.New("llmrate: missing API key")
	// ErrNoWorkspace is what a workspace Extractor (WithWorkspace) should
	// return when the request carries no workspace; llmrate's own
	// extractors read keys and never return it. The middleware answers such
	// a request 401 with code "missing_workspace" (as it does for any error
	// from the workspace extractor, or an empty workspace).
	ErrNoWorkspace = errors.New("llmrate: missing workspace")
	// ErrStoreTimeout is the cause of a StoreError when a store call ran past
	// the limiter's store timeout.
	ErrStoreTimeout = errors.New("llmrate: store call timed out")
	// ErrWriterReleased is returned by every write to a ResponseWriter the
	// middleware gave a handler once that handler has returned: a writer kept
	// past its handler's return (which net/http forbids too) reaches no
	// response, neither its own nor a later request's.
	ErrWriterReleased = errors.New("llmrate: ResponseWriter used after its handler returned")
)

// ConfigError reports an invalid option given to New.
type ConfigError struct {
	Option string // e.g. "WithTiers"
	Err    error
}

// Error names the option and the problem.
func (e *ConfigError) Error() string { return "llmrate: invalid " + e.Option + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *ConfigError) Unwrap() error { return e.Err }

// StoreError reports a store fault that made the limiter fail open. Op is
// "admit" or "reconcile". It never carries a raw API key.
type StoreError struct {
	Op  string
	Err error
}

// Error names the operation and the cause.
func (e *StoreError) Error() string { return "llmrate: store " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *StoreError) Unwrap() error { return e.Err }

// PanicError wraps a panic recovered inside the limiter (a store, resolver,
// estimator or extractor that panicked). The request then fails open.
type PanicError struct {
	Where string
	Value any
}

// Error names where the panic happened and its value.
func (e *PanicError) Error() string { return fmt.Sprintf("llmrate: panic in %s: %v", e.Where, e.Value) }

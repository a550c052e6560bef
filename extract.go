package llmrate

import (
	"net/http"
	"strings"
)

// Extractor pulls an identity (an API key or a workspace) from a request. It
// returns ErrNoKey (or ErrNoWorkspace) when there is none, and must not
// return an error that quotes the raw value.
type Extractor func(*http.Request) (string, error)

// Header returns an Extractor that reads the raw value of the named header,
// trimmed of surrounding space. An absent or blank header yields ErrNoKey.
// A value with control characters or inner whitespace is rejected as absent.
//
// A header-based workspace extractor lets the client pick its own workspace:
// use one only behind an authentication layer that sets or verifies it.
func Header(name string) Extractor {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := cleanToken(headerGet(r.Header, name))
		if v == "" {
			return "", ErrNoKey
		}
		return v, nil
	}
}

// BearerToken returns the default key Extractor: the token of
// "Authorization: Bearer <key>" (scheme case-insensitive), else the value of
// "x-api-key" (Anthropic style). Anything else yields ErrNoKey.
func BearerToken() Extractor {
	return bearerToken
}

func bearerToken(r *http.Request) (string, error) {
	if a := headerGet(r.Header, "Authorization"); a != "" {
		const p = "bearer "
		if len(a) > len(p) && strings.EqualFold(a[:len(p)], p) {
			if k := cleanToken(a[len(p):]); k != "" {
				return k, nil
			}
		}
	}
	if k := cleanToken(headerGet(r.Header, "X-Api-Key")); k != "" {
		return k, nil
	}
	return "", ErrNoKey
}

// headerGet is http.Header.Get for a name already in canonical form: the
// same first value, without Get's per-call canonicalization of the name.
func headerGet(h http.Header, canonical string) string {
	if v := h[canonical]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// cleanToken trims surrounding spaces and tabs and returns "" if what is left
// is empty or holds whitespace, control bytes or DEL: such a value is never a
// usable key, and refusing it keeps keys safe to hash and log as fingerprints.
func cleanToken(s string) string {
	s = strings.Trim(s, " \t")
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return ""
		}
	}
	return s
}

// Package apierr writes the OpenAI-shaped error envelope that both the
// middleware and upstream.Transport answer with (the Anthropic SDK reads
// the same error.type and error.message), and the request id that rides on
// it.
package apierr

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"
)

type envelope struct {
	Error body `json:"error"`
}

type body struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// Body returns {"error":{"message":msg,"type":typ,"param":null,"code":code}}.
func Body(typ, code, msg string) []byte {
	b, _ := json.Marshal(envelope{Error: body{Message: msg, Type: typ, Code: code}})
	return b
}

type anthropicEnvelope struct {
	Type  string        `json:"type"`
	Error anthropicBody `json:"error"`
}

type anthropicBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// AnthropicBody returns Anthropic's error shape,
// {"type":"error","error":{"type":typ,"message":msg}}.
func AnthropicBody(typ, msg string) []byte {
	b, _ := json.Marshal(anthropicEnvelope{Type: "error", Error: anthropicBody{Type: typ, Message: msg}})
	return b
}

// NewRequestID returns a fresh request id: "req_" and 32 hex digits.
func NewRequestID() string {
	return fmt.Sprintf("req_%016x%016x", rand.Uint64(), rand.Uint64())
}

// CeilSeconds returns d in whole seconds, rounded up (d ≥ 0).
func CeilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// Package clients holds tests that put llmrate in front of fake provider
// endpoints and drive them with the providers' official Go SDKs: the
// OpenAI client through httputil.ReverseProxy (identity, gzip and brotli
// responses) and the AWS SDK's Bedrock runtime client (ConverseStream and
// InvokeModelWithResponseStream event streams). Each test checks that the
// SDK reads its response unchanged and that the limiter charges exactly
// the usage the response reported.
//
// overload_test.go puts a gateway at its WithMaxInFlight cap in front of
// the OpenAI and Anthropic SDKs: each retries the shed answer (the 503
// overloaded, Anthropic's 529 overloaded_error) on its own and succeeds.
//
// It is a module of its own so that the SDKs never weigh on the root
// module's go.mod; the repository's go.work ties it in, and CI runs it
// with go test -race ./examples/clients/...
package clients

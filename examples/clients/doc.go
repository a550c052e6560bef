// Package clients holds tests that put llmrate in front of fake provider
// endpoints and drive them with the providers' official Go SDKs: the
// OpenAI client through httputil.ReverseProxy (identity, gzip and brotli
// responses) and the AWS SDK's Bedrock runtime client (ConverseStream and
// InvokeModelWithResponseStream event streams). Each test checks that the
// SDK reads its response unchanged and that the limiter charges exactly
// the usage the response reported.
//
// It is a module of its own so that the SDKs never weigh on the root
// module's go.mod; the repository's go.work ties it in, and CI runs it
// with go test -race ./examples/clients/...
package clients

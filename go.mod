module github.com/llmrate/llmrate

go 1.25.0

require (
	github.com/andybalholm/brotli v1.3.0
	github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream v1.7.27
	github.com/felixge/httpsnoop v1.1.0
	github.com/go-chi/chi/v5 v5.5.0
	github.com/gorilla/mux v1.8.1
	github.com/klauspost/compress v1.20.4
	github.com/redis/go-redis/v9 v9.20.1
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	go.uber.org/zap v1.28.0
)

require (
	github.com/aws/smithy-go v1.28.9 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

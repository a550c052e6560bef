// Command llmrate-load sends a bounded load to one or more llmrate gateways
// on this machine and prints what came back, per workspace:
//
//	go run ./examples/gateway -config <(go run ./cmd/llmrate-load -print-config) &
//	go run ./cmd/llmrate-load -n 100000 -c 256 -keys 1000 -workspaces 50 -stream
//
// Only use it against gateways you run yourself.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/llmrate/llmrate/internal/loadgen"
)

func main() {
	targets := flag.String("targets", "http://127.0.0.1:8080", "comma-separated gateway base URLs, used round-robin")
	n := flag.Int("n", 100_000, "requests to send")
	c := flag.Int("c", 256, "concurrent requests")
	keys := flag.Int("keys", 1000, "distinct API keys")
	workspaces := flag.Int("workspaces", 50, "workspaces the keys are spread over")
	stream := flag.Bool("stream", true, "ask for SSE responses")
	printConfig := flag.Bool("print-config", false, "print the gateway -config file for these keys and exit")
	flag.Parse()
	if *printConfig {
		fmt.Println(loadgen.ConfigJSON(*keys, *workspaces))
		return
	}
	if *n < 1 || *c < 1 || *keys < 1 || *workspaces < 1 {
		fmt.Fprintln(os.Stderr, "llmrate-load: -n, -c, -keys and -workspaces must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res := loadgen.Run(ctx, loadgen.Config{Targets: strings.Split(*targets, ","), Requests: *n, Concurrency: *c, Keys: *keys, Workspaces: *workspaces, Stream: *stream, Seed: 1})
	fmt.Println(res)
	if res.ServerErrors > 0 || res.TransportErrors > 0 {
		os.Exit(1)
	}
}

package redisstore_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestInstructionsHarness drives a redis-server run under cachegrind
// (bench/redis-gauge-instructions.txt has the commands and the figures):
// REDISSTORE_MEASURE_N admissions of one hot key, one at a time, each with
// an ID, and its reconcile when REDISSTORE_MEASURE_RECONCILE is set;
// REDISSTORE_MEASURE_MODE "gauge" sets a key and a workspace gauge, "wait"
// a MaxWait (every request fits now), "window" a rolling 24 h window on
// the key and the workspace, "month" a calendar month (Europe/Berlin) on
// both (bench/quota-redis-cost.txt). Skipped unless
// REDISSTORE_MEASURE_ADDR names the server.
func TestInstructionsHarness(t *testing.T) {
	addr := os.Getenv("REDISSTORE_MEASURE_ADDR")
	if addr == "" {
		t.Skip("REDISSTORE_MEASURE_ADDR not set")
	}
	n, err := strconv.Atoi(os.Getenv("REDISSTORE_MEASURE_N"))
	if err != nil {
		t.Fatal(err)
	}
	mode := os.Getenv("REDISSTORE_MEASURE_MODE")
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	s, err := redisstore.New(c, redisrig.HashKey, redisstore.WithBatching(1), redisstore.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	lim := llmrate.Limits{RequestsPerMinute: 1_000_000_000, TokensPerMinute: 1_000_000_000_000}
	for range n {
		r := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 100, ID: llmrate.NewAdmissionID()}
		switch mode {
		case "gauge":
			r.KeyLimits.ConcurrentRequests, r.WorkspaceLimits.ConcurrentRequests = 10, 10
		case "wait":
			r.MaxWait = 5 * time.Second
		case "window":
			w := []llmrate.Window{{Per: 24 * time.Hour, Requests: 1_000_000_000, Tokens: 1_000_000_000_000}}
			r.KeyLimits.Windows, r.WorkspaceLimits.Windows = w, w
		case "month":
			berlin, err := time.LoadLocation("Europe/Berlin")
			if err != nil {
				t.Fatal(err)
			}
			w := []llmrate.Window{{Calendar: llmrate.CalendarMonth, Zone: berlin, Requests: 1_000_000_000, Tokens: 1_000_000_000_000}}
			r.KeyLimits.Windows, r.WorkspaceLimits.Windows = w, w
		}
		d, err := s.Admit(context.Background(), r)
		if err != nil || !d.Allowed {
			t.Fatalf("admission: %v, allowed %v", err, d.Allowed)
		}
		if os.Getenv("REDISSTORE_MEASURE_RECONCILE") != "" {
			if err := s.Reconcile(context.Background(), llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace,
				KeyLimits: r.KeyLimits, WorkspaceLimits: r.WorkspaceLimits, Estimate: 100, Actual: 100, ID: r.ID,
				Receipt: d.Receipt}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

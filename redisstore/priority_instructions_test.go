package redisstore_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestInstructionsHarnessReserve drives a redis-server run under
// cachegrind for the cost of priority reserves
// (bench/redis-priority-instructions.txt has the commands and the
// figures): REDISSTORE_MEASURE_N admissions of one hot key in a workspace
// of another name, one at a time, each with an ID, and its reconcile.
// REDISSTORE_MEASURE_MODE: "plain"; "window" (a daily window of 10^6
// requests on the key and on the workspace); "gauge" (a key and a
// workspace gauge of 10); "wait" (MaxWait 5 s; every request fits now);
// and each of these with "reserve-" in front: the same with a reserve of
// one half (AdmitRequest.Reserve 500,000). Skipped unless
// REDISSTORE_MEASURE_ADDR names the server. The file builds on commits
// before reserves too (the field existed first), where a reserve is
// ignored: "before" figures come from the modes without one.
func TestInstructionsHarnessReserve(t *testing.T) {
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
	s, err := redisstore.New(c, redisstore.WithHashKey([]byte("instructions-secret-0123456789")), redisstore.WithBatching(1),
		redisstore.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	lim := llmrate.Limits{RequestsPerMinute: 1_000_000_000, TokensPerMinute: 1_000_000_000_000}
	var reserve int64
	if m, ok := strings.CutPrefix(mode, "reserve-"); ok {
		mode, reserve = m, 500_000
	}
	for range n {
		r := llmrate.AdmitRequest{Key: "k", Workspace: "ws", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 100, ID: llmrate.NewAdmissionID(),
			Reserve: reserve}
		switch mode {
		case "window":
			day := []llmrate.Window{{Per: 24 * time.Hour, Requests: 1_000_000}}
			r.KeyLimits.Windows, r.WorkspaceLimits.Windows = day, day
		case "gauge":
			r.KeyLimits.ConcurrentRequests, r.WorkspaceLimits.ConcurrentRequests = 10, 10
		case "wait":
			r.MaxWait = 5 * time.Second
		}
		d, err := s.Admit(context.Background(), r)
		if err != nil || !d.Allowed {
			t.Fatalf("admission: %v, %+v", err, d)
		}
		if err := s.Reconcile(context.Background(), llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace,
			KeyLimits: r.KeyLimits, WorkspaceLimits: r.WorkspaceLimits, Estimate: 100, Actual: 100, ID: r.ID,
			Receipt: d.Receipt}); err != nil {
			t.Fatal(err)
		}
	}
}

// Package loadgen sends a bounded load of chat-completion requests to a
// gateway and tallies what came back, per workspace.
package loadgen

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes one run.
type Config struct {
	Targets     []string // gateway base URLs, used round-robin
	Requests    int
	Concurrency int
	Keys        int  // distinct API keys, "sk-load-<i>"
	Workspaces  int  // key i belongs to workspace "ws-<i % Workspaces>"
	Stream      bool // ask for SSE responses
	Seed        uint64
	// Between, if set, is called (once each) after a third and after two
	// thirds of the requests were sent: for fault injection.
	AtThird, AtTwoThirds func()
}

// Key returns the i-th key.
func Key(i int) string { return fmt.Sprintf("sk-load-%04d", i) }

// Workspace returns the workspace of the i-th key, out of workspaces.
func Workspace(i, workspaces int) string { return fmt.Sprintf("ws-%02d", i%workspaces) }

// Result is what came back.
type Result struct {
	Sent, OK, Refused, ServerErrors, OtherStatus, TransportErrors int64
	AdmittedByWorkspace                                           map[string]int64
	MaxLatency                                                    time.Duration
	Elapsed                                                       time.Duration
}

// String summarises r on one line.
func (r Result) String() string {
	ws := make([]string, 0, len(r.AdmittedByWorkspace))
	for w := range r.AdmittedByWorkspace {
		ws = append(ws, w)
	}
	sort.Strings(ws)
	minA, maxA := int64(-1), int64(0)
	for _, w := range ws {
		a := r.AdmittedByWorkspace[w]
		if minA < 0 || a < minA {
			minA = a
		}
		maxA = max(maxA, a)
	}
	return fmt.Sprintf("sent %d in %v: 200=%d 429=%d 5xx=%d other=%d transport-errors=%d; admitted per workspace %d..%d; slowest %v",
		r.Sent, r.Elapsed.Round(time.Millisecond), r.OK, r.Refused, r.ServerErrors, r.OtherStatus, r.TransportErrors, minA, maxA, r.MaxLatency.Round(time.Millisecond))
}

// Run sends the load and waits for every response.
func Run(ctx context.Context, cfg Config) Result {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, MaxConnsPerHost: cfg.Concurrency}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var (
		t       = tally{byWS: map[string]int64{}}
		next    atomic.Int64
		oneT    sync.Once
		twoT    sync.Once
		wg      sync.WaitGroup
		started = time.Now()
	)
	body := `{"model":"mock","messages":[{"role":"user","content":"hello"}]}`
	if cfg.Stream {
		body = `{"model":"mock","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	}
	for w := range cfg.Concurrency {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
			for {
				i := next.Add(1) - 1
				if i >= int64(cfg.Requests) || ctx.Err() != nil {
					return
				}
				if i == int64(cfg.Requests)/3 && cfg.AtThird != nil {
					oneT.Do(cfg.AtThird)
				}
				if i == 2*int64(cfg.Requests)/3 && cfg.AtTwoThirds != nil {
					twoT.Do(cfg.AtTwoThirds)
				}
				k := r.IntN(cfg.Keys)
				target := cfg.Targets[i%int64(len(cfg.Targets))]
				code, lat, err := send(ctx, client, target, Key(k), body)
				t.add(code, err, k, cfg.Workspaces, lat)
			}
		})
	}
	wg.Wait()
	t.res.Elapsed = time.Since(started)
	t.res.MaxLatency = t.maxLat
	t.res.AdmittedByWorkspace = t.byWS
	return t.res
}

// send posts one chat completion with key to target and reads the whole
// response; it returns the status, the time taken and the transport error.
func send(ctx context.Context, client *http.Client, target, key, body string) (int, time.Duration, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, target+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, time.Since(t0), err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, time.Since(t0), nil
}

// tally counts the responses of every sender.
type tally struct {
	mu     sync.Mutex
	res    Result
	byWS   map[string]int64
	maxLat time.Duration
}

// add counts one response (code, or the transport error err) to a request
// of key k, out of workspaces, that took lat.
func (t *tally) add(code int, err error, k, workspaces int, lat time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.maxLat = max(t.maxLat, lat)
	t.res.Sent++
	switch {
	case err != nil:
		t.res.TransportErrors++
	case code == http.StatusOK:
		t.res.OK++
		t.byWS[Workspace(k, workspaces)]++
	case code == http.StatusTooManyRequests:
		t.res.Refused++
	case code >= 500:
		t.res.ServerErrors++
	default:
		t.res.OtherStatus++
	}
}

// ConfigJSON returns a gateway -config file mapping the keys to their
// workspaces (all Free).
func ConfigJSON(keys, workspaces int) string {
	var b strings.Builder
	b.WriteString(`{"keys":{`)
	for i := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%q", Key(i), Workspace(i, workspaces))
	}
	b.WriteString(`}}`)
	return b.String()
}

package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildGateway builds this program once per test binary run.
var buildOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "llmrate-gw")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "gateway")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &buildError{string(out), err}
	}
	return bin, nil
})

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// testHashKey is the secret every test gateway keys its Redis names with.
var testHashKey = []byte("gateway-test-secret-0123456789")

// startProcesses starts n gateway processes with extra flags and returns
// their base URLs.
func startProcesses(t *testing.T, n int, extra ...string) []string {
	t.Helper()
	bin, err := buildOnce()
	require.NoError(t, err)
	var urls []string
	for range n {
		port := redistest.FreePort(t)
		var stderr strings.Builder
		// Store timeouts generous enough that a loaded machine (CI under
		// -race) never fails open: these tests measure sharing, not faults.
		cmd := exec.Command(bin, append([]string{"-listen", "127.0.0.1:" + strconv.Itoa(port), "-quiet", "-log-level", "error", "-store-timeout", "2s", "-redis-timeout", "1s"}, extra...)...)
		cmd.Stderr = &lockedWriter{w: &stderr}
		cmd.Env = append(os.Environ(), "LLMRATE_HASH_KEY="+string(testHashKey)) // shared by every process
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case err := <-done:
				assert.NoError(t, err, "graceful shutdown on SIGINT; stderr:\n%s", stderr.String())
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Errorf("no shutdown 15 s after SIGINT; stderr:\n%s", stderr.String())
			}
		})
		url := "http://127.0.0.1:" + strconv.Itoa(port)
		require.Eventually(t, func() bool {
			resp, err := http.Get(url + "/healthz")
			if err == nil {
				_ = resp.Body.Close()
			}
			return err == nil && resp.StatusCode == http.StatusOK
		}, 30*time.Second, 20*time.Millisecond)
		urls = append(urls, url)
	}
	return urls
}

// roundRobin sends total requests for one key across the gateways, 24 at a
// time, and returns how many were admitted and how long it took.
func roundRobin(t *testing.T, urls []string, key string, total int) (int64, time.Duration) {
	var admitted atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 24 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(total) {
					return
				}
				req, _ := http.NewRequest(http.MethodPost, urls[i%int64(len(urls))]+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return admitted.Load(), time.Since(start)
}

// TestThreeProcessesOneLimit: three gateway processes sharing one
// redis-server admit 200 of 250 requests for one Free key, like one
// process; with the in-memory store each process enforces on its own.
func TestThreeProcessesOneLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	srv := redistest.Start(t)
	urls := startProcesses(t, 3, "-redis", "redis://"+srv.Addr+"/0")
	admitted, took := roundRobin(t, urls, "sk-shared", 250)
	// Wall clock (Redis TIME): the burst of 200 plus one per 0.6 s elapsed.
	assert.GreaterOrEqual(t, admitted, int64(200))
	assert.LessOrEqual(t, admitted, 200+int64(took/(600*time.Millisecond)), "took %v", took)
	t.Logf("redis, 3 processes: %d of 250 admitted in %v", admitted, took)

	mem := startProcesses(t, 3)
	admitted, took = roundRobin(t, mem, "sk-shared", 250)
	assert.Equal(t, int64(250), admitted, "per process: each of 3 processes admits its own 200 burst (took %v)", took)
	t.Logf("memory, 3 processes: %d of 250 admitted in %v", admitted, took)
}

// TestThreeProcessesLeases: the same with leases of 0.1 of the capacity:
// never more than the exact limit, and at most 3 × 0.1 × 200 less.
func TestThreeProcessesLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	srv := redistest.Start(t)
	urls := startProcesses(t, 3, "-redis", "redis://"+srv.Addr+"/0", "-leases", "0.1")
	admitted, took := roundRobin(t, urls, "sk-shared", 250)
	// Wall clock (Redis TIME): one request refills per 0.6 s elapsed.
	assert.GreaterOrEqual(t, admitted, int64(200-3*20))
	assert.LessOrEqual(t, admitted, 200+int64(took/(600*time.Millisecond)), "took %v", took)
	t.Logf("redis with leases 0.1, 3 processes: %d of 250 admitted in %v", admitted, took)
}

// Package redistest starts private redis-server processes for tests.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RequireEnv, when set to 1, turns a missing redis-server into a test
// failure instead of a skip (CI sets it).
const RequireEnv = "LLMRATE_REQUIRE_REDIS"

// Server is a redis-server started for one test.
type Server struct {
	Addr string
	Port int
	t    testing.TB
	cmd  *exec.Cmd
	args []string
	done chan struct{}
}

// Binary returns the redis-server path, or skips (fails, under
// RequireEnv=1) the test when it is not installed.
func Binary(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not installed (apt-get install redis-server); skipping Redis tests"
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s, but %s=1 requires them", msg, RequireEnv)
		}
		t.Skip(msg)
	}
	return p
}

// FreePort returns a loopback port that was free a moment ago (redis-server
// cannot listen on port 0).
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start starts a redis-server with persistence off on a free loopback port
// and stops it (by pid) when the test ends. extra arguments are appended.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := Binary(t)
	var lastErr error
	for range 5 {
		port := FreePort(t)
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, t: t}
		s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no", "--dir", t.TempDir()}, extra...)
		if lastErr = s.start(bin); lastErr == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return nil
}

func (s *Server) start(bin string) error {
	s.cmd = exec.Command(bin, s.args...)
	s.cmd.Stdout, s.cmd.Stderr = nil, nil
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(s.cmd, s.done)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if s.ping() == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("redis-server on %s exited at start (port taken?)", s.Addr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.Stop()
	return fmt.Errorf("redis-server on %s did not answer PING", s.Addr)
}

func (s *Server) ping() error {
	c, err := net.DialTimeout("tcp", s.Addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Stop kills the server and waits for it to exit. Stopping twice is fine.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart starts the server again on the same port (with empty data).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	for range 20 {
		if err = s.start(Binary(t)); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond) // the port may linger briefly
	}
	t.Fatalf("restart: %v", err)
}

// Cluster starts three cluster-enabled masters and joins them with
// redis-cli --cluster create. It skips (fails under RequireEnv=1) when
// redis-cli is missing.
func Cluster(t testing.TB) []string {
	t.Helper()
	Binary(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("redis-cli not installed, but %s=1", RequireEnv)
		}
		t.Skip("redis-cli not installed; skipping the Redis Cluster test")
	}
	var addrs []string
	for range 3 {
		s := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		addrs = append(addrs, s.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// Wait until every node reports the cluster ok.
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		for i := 0; ; i++ {
			info, _ := exec.CommandContext(ctx, cli, "-h", host, "-p", port, "cluster", "info").Output()
			if strings.Contains(string(info), "cluster_state:ok") {
				break
			}
			if i > 200 {
				t.Fatalf("cluster on %s not ok:\n%s", a, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return addrs
}

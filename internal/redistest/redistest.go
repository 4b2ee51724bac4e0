// Package redistest runs a real redis-server for tests.
package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenring/tokenring/internal/loopback"
)

// Start runs redis-server (no persistence) on a free loopback port until t
// ends, and returns its address once it answers PING. Without
// redis-server the test is skipped locally and fails in CI (CI=true).
func Start(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is required in CI (.ci/run installs it): %v", err)
		}
		t.Skipf("skipping: redis-server not installed (%v); CI installs it", err)
	}
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test binary
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	deadline := time.Now().Add(10 * time.Second)
	for client.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not answer PING")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr
}

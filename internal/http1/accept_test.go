package http1

import (
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
)

// failingListener's first fail Accepts return EMFILE, as a process out of
// descriptors sees; the later ones accept.
type failingListener struct {
	net.Listener
	fail  int32
	calls atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.calls.Add(1) <= l.fail {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestEMFILEOnAcceptIsRetried: Serve outlives five EMFILEs in a row (the
// issue's node exited on the first) and answers the connection waiting
// behind them; the cleanup asserts Serve returned only at Shutdown, with
// http.ErrServerClosed.
func TestEMFILEOnAcceptIsRetried(t *testing.T) {
	eachMode(t, func(t *testing.T, loops int) {
		var fl *failingListener
		ts := startServerOn(t, Config{Loops: loops}, func(ln net.Listener) net.Listener {
			fl = &failingListener{Listener: ln, fail: 5}
			return fl
		})
		c := ts.dial(t)
		c.send(t, post("/a", "after emfile"))
		resp, body := c.read(t)
		if resp.StatusCode != http.StatusOK || body != "fast /a after emfile" {
			t.Fatalf("answer %d %q, want 200 %q", resp.StatusCode, body, "fast /a after emfile")
		}
		if got := fl.calls.Load(); got < 6 {
			t.Fatalf("%d Accept calls, want the 5 failures and then at least the connection's", got)
		}
	})
}

// TestReserveClosesConnectionsAtOnce: with a reserve that leaves no
// descriptor above stderr usable, every accepted connection is closed
// unanswered and counted.
func TestReserveClosesConnectionsAtOnce(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{FDReserve: int(rl.Cur) - 3}) // the mark is descriptor 3
	for i := range 3 {
		c := ts.dial(t)
		c.send(t, post("/a", "x"))
		if !c.closed() {
			t.Fatalf("connection %d answered, want it closed at once", i)
		}
	}
	if got := ts.ReserveRefused(); got != 3 {
		t.Fatalf("ReserveRefused = %d, want 3", got)
	}
}

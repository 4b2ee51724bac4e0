package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tokenring/tokenring/config"
)

// testServer serves newHTTPServer(hc) on a capped loopback listener: POST
// /v1/acquire reads its body (counting complete and cut ones), GET /healthz
// answers ok, POST /v1/chat/completions streams steps chunks, 100 ms apart,
// GET /slow answers after sleeping.
type testServer struct {
	addr           string
	ln             *cappedListener
	complete, cut  atomic.Int64
	streamCanceled atomic.Int64
}

func startTestServer(t *testing.T, hc config.HTTP, steps int, slow time.Duration) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: ln.Addr().String(), ln: newCappedListener(ln, hc.MaxConns, slog.New(slog.DiscardHandler))}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/acquire", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			ts.cut.Add(1)
			http.Error(w, "cut", http.StatusBadRequest)
			return
		}
		ts.complete.Add(1)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(slow)
		io.WriteString(w, strings.Repeat("x", 1<<20))
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		for i := range steps {
			select {
			case <-r.Context().Done():
				ts.streamCanceled.Add(1)
				return
			case <-time.After(100 * time.Millisecond):
			}
			fmt.Fprintf(w, "data: %d\n\n", i)
			http.NewResponseController(w).Flush()
		}
	})
	srv := newHTTPServer(mux, hc)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ts.ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return ts
}

func testHTTP() config.HTTP {
	return config.HTTP{MaxConns: 10000, FastPath: true, ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 500 * time.Millisecond,
		IdleTimeout: 400 * time.Millisecond, WriteTimeout: 300 * time.Millisecond}
}

func healthz(t *testing.T, addr string) error {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		return fmt.Errorf("healthz: %d %q", resp.StatusCode, body)
	}
	return nil
}

// TestSlowBodiesCutByReadTimeout: 200 never-ending chunked bodies and 200
// bodies trickled at 1 byte/s are all cut at read_timeout, none completes,
// and /healthz answers meanwhile.
func TestSlowBodiesCutByReadTimeout(t *testing.T) {
	hc := testHTTP()
	ts := startTestServer(t, hc, 0, 0)
	const each = 200
	var wg sync.WaitGroup
	var closed, tooLate atomic.Int64
	stop := make(chan struct{})
	slowClient := func(chunked bool) {
		defer wg.Done()
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		begin := time.Now()
		if chunked {
			fmt.Fprint(c, "POST /v1/acquire HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
		} else {
			fmt.Fprint(c, "POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
		}
		go func() { // the body: a chunk every 50 ms for ever, or a byte a second
			every, piece := time.Second, "a"
			if chunked {
				every, piece = 50*time.Millisecond, "1\r\na\r\n"
			}
			for {
				select {
				case <-stop:
					return
				case <-time.After(every):
				}
				if _, err := io.WriteString(c, piece); err != nil {
					return
				}
			}
		}()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.Copy(io.Discard, c) // until the server closes the connection
		closed.Add(1)
		if time.Since(begin) > hc.ReadTimeout+2*time.Second {
			tooLate.Add(1)
		}
	}
	for range each {
		wg.Add(2)
		go slowClient(true)
		go slowClient(false)
	}
	time.Sleep(hc.ReadTimeout / 2)
	if err := healthz(t, ts.addr); err != nil {
		t.Errorf("/healthz while %d slow bodies: %v", 2*each, err)
	}
	wg.Wait()
	close(stop)
	if closed.Load() != 2*each || tooLate.Load() != 0 || ts.cut.Load() != 2*each || ts.complete.Load() != 0 {
		t.Errorf("closed %d (too late %d), cut %d, complete %d; want %d closed in time, %d cut, 0 complete",
			closed.Load(), tooLate.Load(), ts.cut.Load(), ts.complete.Load(), 2*each, 2*each)
	}
	if err := healthz(t, ts.addr); err != nil {
		t.Errorf("/healthz after: %v", err)
	}
}

// TestIdleConnectionClosed: a keep-alive connection with no next request is
// closed after idle_timeout, not before.
func TestIdleConnectionClosed(t *testing.T) {
	hc := testHTTP()
	hc.ReadHeaderTimeout = 0 // so that only the idle timeout applies (net/http: ReadHeaderTimeout 0 is ReadTimeout)
	hc.ReadTimeout = 10 * time.Second
	ts := startTestServer(t, hc, 0, 0)
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	answered := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: %v, want EOF", err)
	}
	if idle := time.Since(answered); idle < hc.IdleTimeout-50*time.Millisecond || idle > hc.IdleTimeout+time.Second {
		t.Errorf("idle connection closed after %v, want about %v", idle, hc.IdleTimeout)
	}
}

// TestConnectionCap: beyond max_conns a connection gets the canned JSON 503
// with Connection: close and is closed, counted in the refused metric; once
// the others close, the node serves again.
func TestConnectionCap(t *testing.T) {
	hc := testHTTP()
	hc.MaxConns = 5
	hc.ReadHeaderTimeout, hc.IdleTimeout = 10*time.Second, 10*time.Second
	ts := startTestServer(t, hc, 0, 0)
	var held []net.Conn
	for range hc.MaxConns {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for ts.ln.open.Load() != int64(hc.MaxConns) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	const extra = 3
	for i := range extra {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("refused connection %d: %v", i, err)
		}
		var body struct{ Error string }
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close ||
			resp.Header.Get("Content-Type") != "application/json" || err != nil || !strings.Contains(body.Error, "max_conns") {
			t.Errorf("refused connection %d: %d %v %+v %v", i, resp.StatusCode, resp.Header, body, err)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("refused connection %d still open: %v", i, err)
		}
		c.Close()
	}
	if got := ts.ln.refused.Load(); got != extra {
		t.Errorf("refused %d, want %d", got, extra)
	}
	if got := ts.ln.open.Load(); got != int64(hc.MaxConns) {
		t.Errorf("open %d, want %d", got, hc.MaxConns)
	}
	for _, c := range held {
		c.Close()
	}
	for ts.ln.open.Load() != 0 && time.Now().Before(deadline.Add(5*time.Second)) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := healthz(t, ts.addr); err != nil {
		t.Errorf("/healthz once the others closed: %v", err)
	}
	if got := ts.ln.refused.Load(); got != extra {
		t.Errorf("refused %d after, want %d", got, extra)
	}
}

// TestStreamsExemptFromDeadlines: a stream on /v1/chat/completions runs
// well past read_timeout and write_timeout to its end, while a plain answer
// slower than write_timeout is cut.
func TestStreamsExemptFromDeadlines(t *testing.T) {
	hc := testHTTP()
	const steps = 12 // 1.2 s, beyond both 500 ms and 300 ms
	ts := startTestServer(t, hc, steps, 2*hc.WriteTimeout)
	resp, err := http.Post("http://"+ts.addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || strings.Count(string(body), "data: ") != steps || ts.streamCanceled.Load() != 0 {
		t.Errorf("stream: %d events of %d, canceled %d, %v", strings.Count(string(body), "data: "), steps, ts.streamCanceled.Load(), err)
	}
	resp, err = http.Get("http://" + ts.addr + "/slow")
	if err == nil {
		n, rerr := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if rerr == nil && n == 1<<20 {
			t.Errorf("an answer slower than write_timeout went through whole")
		}
	}
}

// TestAutoMaxConns: ¾ of RLIMIT_NOFILE, within [64, 16384].
func TestAutoMaxConns(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip(err)
	}
	want := int(min(max(rl.Cur/4*3, 64), maxAutoConns))
	if got := autoMaxConns(); got != want {
		t.Errorf("autoMaxConns() = %d, want %d (RLIMIT_NOFILE %d)", got, want, rl.Cur)
	}
}

// TestCannedErrorsAreJSON: what net/http answers by itself (a URL past
// maxHeaderBytes: 431; a malformed request line: 400) comes back as JSON
// like every other error, with the same status, and the node serves on.
func TestCannedErrorsAreJSON(t *testing.T) {
	ts := startTestServer(t, testHTTP(), 0, 0)
	for _, c := range []struct {
		name, req string
		code      int
	}{
		{"1 MB URL", "GET /v1/tenants/" + strings.Repeat("a", 1<<20) + " HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
		{"malformed request line", "GET\r\nHost: x\r\n\r\n", http.StatusBadRequest},
	} {
		conn, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		go func() { _, _ = io.WriteString(conn, c.req) }() // the node may answer before reading it all
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var body struct{ Error string }
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != c.code || resp.Header.Get("Content-Type") != "application/json" || err != nil || body.Error == "" {
			t.Errorf("%s: %d %q %+v %v, want %d with a JSON error", c.name, resp.StatusCode, resp.Header.Get("Content-Type"), body, err, c.code)
		}
	}
	resp, err := http.Get("http://" + ts.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz after the canned errors: %d", resp.StatusCode)
	}
	// net/http lingers 500 ms before it closes a connection it refused.
	http.DefaultClient.CloseIdleConnections()
	for deadline := time.Now().Add(5 * time.Second); ts.ln.open.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

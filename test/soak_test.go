package test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var runSoak = flag.Bool("soak", false, "run TestSoak (make soak): a minute of connection floods, slowloris and a million tenants against one node")

// Soak bounds. The whole soak, from the node's start to its stop, stays
// under a minute.
const (
	soakLoad      = 36 * time.Second // floods and tenants
	soakFallBack  = 18 * time.Second // for the keys to empty and memory to return
	soakTenants   = 1_000_000
	soakMaxKeys   = 100_000
	soakIdleConns = 10_000
	soakSlowloris = 200 // each: trickled headers, and trickled bodies
	soakHealthMax = 100 * time.Millisecond
	soakPipelines = 4   // connections sending the tenants, pipelined
	soakPipeDepth = 128 // requests written before their answers are read
	// The RSS bound (README, "Security"): at rest, plus twice (Go's
	// collector lets the heap grow to twice what is live) what the keys
	// and the connections hold, plus slack for the runtime's own.
	soakBytesOfKey = 2 << 10  // a key with the default 60-bucket window, its map entry and name (measured 1.6 KiB)
	soakBytesOfCon = 24 << 10 // an open HTTP connection: goroutine, buffers (measured 19 KiB)
	soakBaseSlack  = 64 << 20
)

// soakConfig: a 10 s window and lease TTL (the soak's acquires are never
// completed), so that the million tenants' keys empty, and are dropped,
// within the soak; and max_keys 100,000.
var soakConfig = fmt.Sprintf(`
max_keys: %d
limits:
  default: {rpm: 1000, tpm: 100000000, concurrency: 1000}
  window: 10s
  lease_ttl: 10s
`, soakMaxKeys)

// TestSoak is one node under every flood at once, for a bounded minute:
// 10,000 idle keep-alive connections, 200 connections trickling their
// headers and 200 trickling their bodies at a byte a second, and a million
// distinct tenants as fast as pipelined connections send them. Throughout,
// /healthz answers within 100 ms; the node's RSS stays under its bound
// (README, "Security": what it costs at rest, plus max_keys keys and the
// open connections); every slowloris connection is cut by the read
// timeouts; and once the floods stop and the window empties, the keys are
// dropped and the RSS falls back.
func TestSoak(t *testing.T) {
	if !*runSoak {
		t.Skip("the soak runs only with -soak (make soak): it floods one node for a minute")
	}
	c := NewCluster(t, daemon, 1, soakConfig)
	p := c.Nodes()[0]
	pid := p.cmd.Process.Pid
	rss := func() int64 { return procRSS(t, pid) }
	base := rss()
	bound := base + soakBaseSlack + 2*(soakMaxKeys*soakBytesOfKey+(soakIdleConns+2*soakSlowloris+soakPipelines)*soakBytesOfCon)
	t.Logf("RSS at rest %d MiB; bound %d MiB", base>>20, bound>>20)

	ctx, cancel := context.WithTimeout(context.Background(), soakLoad)
	defer cancel()
	var wg sync.WaitGroup
	health := pollHealth(ctx, &wg, p.URL())
	var peak atomic.Int64
	samplerDone := sampleRSS(ctx, &wg, rss, &peak)
	idle := openIdle(t, p.HTTP, soakIdleConns)
	slow := startSlowloris(ctx, &wg, p.HTTP, soakSlowloris)
	sent, codes := sendTenants(ctx, &wg, p.HTTP, soakTenants)
	wg.Wait()
	<-samplerDone
	for _, c := range idle {
		c.Close()
	}

	t.Logf("tenants sent %d, answers %v; /healthz: %d polls, slowest %v; RSS peak %d MiB",
		sent.Load(), codes.snapshot(), health.polls.Load(), time.Duration(health.slowest.Load()), peak.Load()>>20)
	if n := health.late.Load(); n > 0 || health.failed.Load() > 0 {
		t.Errorf("/healthz: %d of %d polls over %v, %d failed (slowest %v)", n, health.polls.Load(), soakHealthMax, health.failed.Load(), time.Duration(health.slowest.Load()))
	}
	if peak.Load() > bound {
		t.Errorf("RSS peaked at %d MiB, over the bound of %d MiB", peak.Load()>>20, bound>>20)
	}
	if cut, all := slow.cut.Load(), int64(2*soakSlowloris); cut != all {
		t.Errorf("slowloris: %d of %d connections cut by the node's read timeouts", cut, all)
	}
	if got := codes.count(http.StatusOK); got < soakMaxKeys {
		t.Errorf("only %d tenants admitted: the flood did not fill max_keys", got)
	}
	if other := codes.other(); other > 0 {
		t.Errorf("%d answers neither 200 nor 503 (max_keys): %v", other, codes.snapshot())
	}

	// The floods stopped: the window empties, the sweep drops the keys,
	// and the memory they held goes back to the OS.
	deadline := time.Now().Add(soakFallBack)
	target := base + (peak.Load()-base)/2
	for rss() > target && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
	}
	var st struct {
		Keys int64 `json:"keys"`
	}
	_ = p.GetJSON("/admin/stats", &st)
	t.Logf("after the floods: RSS %d MiB (at rest %d, peak %d), keys %d", rss()>>20, base>>20, peak.Load()>>20, st.Keys)
	if now := rss(); now > target {
		t.Errorf("RSS did not fall back: %d MiB, more than halfway from rest (%d) to peak (%d)", now>>20, base>>20, peak.Load()>>20)
	}
}

// procRSS is pid's resident set in bytes.
func procRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

func sampleRSS(ctx context.Context, wg *sync.WaitGroup, rss func() int64, peak *atomic.Int64) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if v := rss(); v > peak.Load() {
				peak.Store(v)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return done
}

// healthPolls is what pollHealth saw.
type healthPolls struct {
	polls, late, failed, slowest atomic.Int64
}

// pollHealth GETs /healthz every 50 ms, each on its own new connection (as
// a load balancer's health check does), until ctx ends.
func pollHealth(ctx context.Context, wg *sync.WaitGroup, url string) *healthPolls {
	h := &healthPolls{}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			start := time.Now()
			resp, err := client.Get(url + "/healthz")
			took := time.Since(start)
			h.polls.Add(1)
			if err != nil || resp.StatusCode != http.StatusOK {
				h.failed.Add(1)
			}
			if err == nil {
				resp.Body.Close()
			}
			if took > soakHealthMax {
				h.late.Add(1)
			}
			if int64(took) > h.slowest.Load() {
				h.slowest.Store(int64(took))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return h
}

// openIdle opens n keep-alive connections, each sending one request and
// then nothing.
func openIdle(t *testing.T, addr string, n int) []net.Conn {
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					failed.Add(1)
					continue
				}
				conns[i] = c
				fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: soak\r\n\r\n")
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
					resp.Body.Close()
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Errorf("%d of %d idle connections failed to open", failed.Load(), n)
	}
	live := conns[:0]
	for _, c := range conns {
		if c != nil {
			live = append(live, c)
		}
	}
	return live
}

// slowloris counts the trickling connections the node cut.
type slowloris struct{ cut atomic.Int64 }

// startSlowloris opens n connections that trickle their headers and n that
// send whole headers then trickle a body, a byte a second, until the node
// cuts them or ctx ends.
func startSlowloris(ctx context.Context, wg *sync.WaitGroup, addr string, n int) *slowloris {
	s := &slowloris{}
	headers := "POST /v1/acquire HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
	for i := range 2 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			trickle := headers // the headers, a byte a second
			if i%2 == 1 {      // the headers at once, then the body
				if _, err := io.WriteString(c, headers); err != nil {
					s.cut.Add(1)
					return
				}
				trickle = strings.Repeat("{", 100000)
			}
			cut := make(chan struct{})
			go func() { // the node closing the connection ends this read
				_, _ = io.Copy(io.Discard, c)
				close(cut)
			}()
			for k := 0; k < len(trickle); k++ {
				select {
				case <-cut:
					s.cut.Add(1)
					return
				case <-ctx.Done():
					c.Close()
					<-cut
					return
				case <-time.After(time.Second):
				}
				if _, err := c.Write([]byte{trickle[k]}); err != nil {
					s.cut.Add(1)
					return
				}
			}
		}()
	}
	return s
}

// statusCounts counts answers by status code.
type statusCounts struct {
	mu sync.Mutex
	m  map[int]int64
}

func (s *statusCounts) add(code int) {
	s.mu.Lock()
	s.m[code]++
	s.mu.Unlock()
}

func (s *statusCounts) count(code int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[code]
}

func (s *statusCounts) other() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for code, k := range s.m {
		if code != http.StatusOK && code != http.StatusServiceUnavailable {
			n += k
		}
	}
	return n
}

func (s *statusCounts) snapshot() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.m)
}

// sendTenants sends acquires for n distinct tenants over soakPipelines
// connections, soakPipeDepth requests written before their answers are
// read, until all are sent or ctx ends.
func sendTenants(ctx context.Context, wg *sync.WaitGroup, addr string, n int64) (*atomic.Int64, *statusCounts) {
	var next atomic.Int64
	codes := &statusCounts{m: map[int]int64{}}
	for range soakPipelines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				codes.add(-1)
				return
			}
			defer c.Close()
			br, bw := bufio.NewReaderSize(c, 64<<10), bufio.NewWriterSize(c, 64<<10)
			for ctx.Err() == nil {
				first := next.Add(soakPipeDepth) - soakPipeDepth
				if first >= n {
					return
				}
				k := min(int64(soakPipeDepth), n-first)
				for i := range k {
					body := fmt.Sprintf(`{"tenant":"soak-%d","prompt_tokens":1}`, first+i)
					fmt.Fprintf(bw, "POST /v1/acquire HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if bw.Flush() != nil {
					codes.add(-1)
					return
				}
				for range k {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						codes.add(-1)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					codes.add(resp.StatusCode)
				}
			}
		}()
	}
	return &next, codes
}

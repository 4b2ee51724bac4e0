package main

import (
	"bytes"
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/test/fakeupstream"
)

// -system proxy against the fake provider: every completion counts, the
// key and stream flag are sent; -stream times the first byte only, yet
// reads each stream to its end; a 401 is an error, not a decision.
func TestLoadProxy(t *testing.T) {
	up := fakeupstream.NewUpstream(t, "sk-bench")
	base := up.URL()[:len(up.URL())-len("/v1")]
	res, err := runLoadCLI(t, "-system", "proxy", "-targets", base, "-api-key", "sk-bench", "-model", "m1", "-n", "20", "-c", "2", "-d", "1m")
	if err != nil {
		t.Fatal(err)
	}
	want := loadResult{Requests: 20, Allowed: 20, Codes: map[string]int{"200": 20}, Route: "rr", Workers: 2}
	if got := countsOf(res); !equalCounts(got, want) {
		t.Fatalf("whole answers: reported %+v\nwant       %+v", got, want)
	}
	reqs := up.Requests()
	if len(reqs) != 20 || reqs[0].Path != "/v1/chat/completions" || reqs[0].Body["stream"] != false || reqs[0].Body["model"] != "m1" {
		t.Fatalf("the upstream got %d requests, the first %+v", len(reqs), reqs[0])
	}

	const delay = 100 * time.Millisecond // before each of the 2 chunks after the first
	up.SetReply(fakeupstream.UpstreamReply{ChunkDelay: delay, PromptTokens: 1, CompletionTokens: 3})
	start := time.Now()
	res, err = runLoadCLI(t, "-system", "proxy", "-stream", "-targets", base, "-api-key", "sk-bench", "-n", "3", "-c", "1", "-d", "1m")
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed != 3 || res.Errors != 0 || res.MaxUs >= float64(delay.Microseconds()) {
		t.Fatalf("stream: %+v; want 3 admitted, each timed to its first byte (< %v)", res, delay)
	}
	if took := time.Since(start); took < 6*delay {
		t.Fatalf("3 streams of 2 delays each read in %v: not to their end", took)
	}
	if reqs := up.Requests(); len(reqs) != 23 || reqs[22].Body["stream"] != true {
		t.Fatalf("the upstream got %d requests, the last %+v", len(reqs), reqs[len(reqs)-1])
	}

	res, err = runLoadCLI(t, "-system", "proxy", "-targets", base, "-api-key", "sk-wrong", "-n", "5", "-c", "1", "-d", "1m")
	if err != nil || res.Allowed != 0 || res.Errors != 5 || res.Codes["401"] != 5 {
		t.Fatalf("wrong key: %+v %v; want 5 errors, each a 401", countsOf(res), err)
	}
}

// -announce prints the started line once on stderr, before the run's
// first request, then the stopped line; without it stderr stays empty.
func TestLoadAnnounce(t *testing.T) {
	var seenAtFirst atomic.Value
	var stderr lockedBuffer
	f := newFakeNode(t, func(n int64) string {
		if n == 1 {
			seenAtFirst.Store(stderr.String())
		}
		return "allow"
	})
	for _, announce := range []bool{true, false} {
		stderr.Reset()
		args := []string{"load", "-targets", f.srv.URL, "-n", "3", "-c", "1"}
		if announce {
			args = append(args, "-announce")
		}
		if err := run(context.Background(), args, io.Discard, &stderr); err != nil {
			t.Fatal(err)
		}
		want := ""
		if announce {
			want = loadStartedLine + "\n" + loadStoppedLine + "\n"
		}
		if got := stderr.String(); got != want {
			t.Errorf("-announce=%v: stderr %q, want %q", announce, got, want)
		}
		if announce && seenAtFirst.Load() != loadStartedLine+"\n" {
			t.Errorf("at the first acquire stderr was %q, want %q", seenAtFirst.Load(), loadStartedLine+"\n")
		}
		f.acquires.Store(0)
	}
}

// lockedBuffer is a bytes.Buffer safe for one writer and other readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *lockedBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

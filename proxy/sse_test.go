package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// flushRecorder records, at each flush, how many body bytes had been
// written; flushed receives a value after each.
type flushRecorder struct {
	*httptest.ResponseRecorder
	mu      sync.Mutex
	at      []int
	flushed chan struct{}
}

func newFlushRecorder() *flushRecorder {
	return &flushRecorder{ResponseRecorder: httptest.NewRecorder(), flushed: make(chan struct{}, 100)}
}

func (f *flushRecorder) Flush() {
	f.mu.Lock()
	f.ResponseRecorder.Flush()
	f.at = append(f.at, f.Body.Len())
	f.mu.Unlock()
	f.flushed <- struct{}{}
}

// flushes returns the body length at each flush that sent new bytes.
func (f *flushRecorder) flushes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, n := range f.at {
		if len(out) == 0 && n > 0 || len(out) > 0 && n > out[len(out)-1] {
			out = append(out, n)
		}
	}
	return out
}

// waitFlush waits for a flush after which the body holds want bytes.
func (f *flushRecorder) waitFlush(t *testing.T, want int) {
	t.Helper()
	for {
		f.mu.Lock()
		n := -1
		if len(f.at) > 0 {
			n = f.at[len(f.at)-1]
		}
		f.mu.Unlock()
		if n == want {
			return
		}
		select {
		case <-f.flushed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no flush with %d body bytes (last: %d): the relay waits on the upstream holding what it wrote", want, n)
		}
	}
}

// relayTo runs relayStream of an OpenAI stream read from body into f, in
// an exchange whose settle the cluster answers; done is closed when it
// returns.
func relayTo(t *testing.T, f *flushRecorder, body io.Reader) (done chan struct{}) {
	t.Helper()
	s := newRenewServer(t, &renewCluster{})
	x := &exchange{s: s, c: &proxyCall{p: openAI{}, model: "m"}, l: tenantLease("acme", 1),
		ctx: context.Background(), stopRenew: func() {}}
	x.seen.countText = textCounter(nil, "m")
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	resp := &http.Response{StatusCode: 200, Body: io.NopCloser(body)}
	done = make(chan struct{})
	go func() {
		defer close(done)
		x.relayStream(f, req, resp)
	}()
	return done
}

const sseEvent = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"

// TestRelayFlushesBeforeWaiting: each event is flushed before the relay
// waits on the upstream for the next one, and a stream whose first event
// is late has its headers sent alone first.
func TestRelayFlushesBeforeWaiting(t *testing.T) {
	pr, pw := io.Pipe()
	f := newFlushRecorder()
	done := relayTo(t, f, pr)
	f.waitFlush(t, 0) // the headers, the first event not there yet
	for i := 1; i <= 3; i++ {
		if _, err := io.WriteString(pw, sseEvent); err != nil {
			t.Fatal(err)
		}
		f.waitFlush(t, i*len(sseEvent))
	}
	io.WriteString(pw, "data: [DONE]\n\n")
	pw.Close()
	<-done
	if got := f.Body.String(); got != strings.Repeat(sseEvent, 3)+"data: [DONE]\n\n" {
		t.Fatalf("client got %q", got)
	}
}

// TestRelayCoalescesFlushes: events that arrived together leave together:
// the first one at once, the rest in one flush.
func TestRelayCoalescesFlushes(t *testing.T) {
	f := newFlushRecorder()
	all := strings.Repeat(sseEvent, 4) + "data: [DONE]\n\n"
	<-relayTo(t, f, bytes.NewReader([]byte(all)))
	if got := f.Body.String(); got != all {
		t.Fatalf("client got %q", got)
	}
	if got := f.flushes(); len(got) != 2 || got[0] != len(sseEvent) || got[1] != len(all) {
		t.Fatalf("flushes at %v body bytes, want [%d %d]", got, len(sseEvent), len(all))
	}
}

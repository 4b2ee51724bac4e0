package http1

import (
	"bufio"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

const plainAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nX-Ratelimit-Remaining-Requests: 9\r\n\r\n{}"

func TestParseResponseHeadReadsWhatUpstreamsSend(t *testing.T) {
	for _, c := range []struct {
		name, head    string
		status        int
		length        int64
		chunked, shut bool
	}{
		{"length", plainAnswer, 200, 2, false, false},
		{"chunked stream", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n", 200, -1, true, false},
		{"close-delimited stream", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", 200, -1, false, true},
		{"connection close", "HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 429, 0, false, true},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n", 200, 5, false, true},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 5\r\n\r\n", 200, 5, false, false},
		{"no content", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", 204, 0, false, false},
		{"continue", "HTTP/1.1 100 Continue\r\n\r\n", 100, 0, false, false},
		{"no reason", "HTTP/1.1 502\r\nContent-Length: 1\r\n\r\n", 502, 1, false, false},
	} {
		var h ResponseHead
		n, err := ParseResponseHead([]byte(c.head+"rest"), &h)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		end := strings.Index(c.head, "\r\n\r\n") + 4
		if n != end || h.StatusCode != c.status || h.ContentLength != c.length || h.Chunked != c.chunked || h.Close != c.shut {
			t.Errorf("%s: n %d status %d length %d chunked %v close %v, want %d %d %d %v %v",
				c.name, n, h.StatusCode, h.ContentLength, h.Chunked, h.Close, end, c.status, c.length, c.chunked, c.shut)
		}
	}
}

// TestParseResponseHeadRefusesTheRest: heads outside the subset are
// ErrResponseHead (the request fails rather than be misread), an
// unfinished one ErrIncomplete.
func TestParseResponseHeadRefusesTheRest(t *testing.T) {
	for _, c := range []struct{ name, head string }{
		{"HTTP/2", strings.Replace(plainAnswer, "HTTP/1.1", "HTTP/2.0", 1)},
		{"two-digit status", strings.Replace(plainAnswer, "200", "20", 1)},
		{"status 600", strings.Replace(plainAnswer, "200", "600", 1)},
		{"signed status", strings.Replace(plainAnswer, "200", "+20", 1)},
		{"two lengths", strings.Replace(plainAnswer, "Content-Length: 2", "Content-Length: 2\r\nContent-Length: 2", 1)},
		{"signed length", strings.Replace(plainAnswer, ": 2", ": +2", 1)},
		{"gzip transfer", strings.Replace(plainAnswer, "Content-Length: 2", "Transfer-Encoding: gzip, chunked", 1)},
		{"length and chunked", strings.Replace(plainAnswer, "Content-Length: 2", "Content-Length: 2\r\nTransfer-Encoding: chunked", 1)},
		{"chunked HTTP/1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"folded", strings.Replace(plainAnswer, "Content-Type: application/json", "Content-Type: application/json\r\n more", 1)},
		{"bad name", strings.Replace(plainAnswer, "Content-Type", "Content Type", 1)},
		{"control in value", strings.Replace(plainAnswer, "application/json", "application/\x01json", 1)},
		{"bare LF", strings.ReplaceAll(plainAnswer, "\r\n", "\n")},
	} {
		var h ResponseHead
		if _, err := ParseResponseHead([]byte(c.head), &h); !errors.Is(err, ErrResponseHead) {
			t.Errorf("%s: %v, want ErrResponseHead", c.name, err)
		}
	}
	var h ResponseHead
	if _, err := ParseResponseHead([]byte(plainAnswer[:strings.Index(plainAnswer, "\r\n\r\n")+2]), &h); !errors.Is(err, ErrIncomplete) {
		t.Errorf("unfinished head: %v, want ErrIncomplete", err)
	}
}

func TestParseResponseHeadAllocatesNothing(t *testing.T) {
	b := []byte(plainAnswer)
	var h ResponseHead
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseResponseHead(b, &h) }); n != 0 {
		t.Fatalf("%v allocations, want 0", n)
	}
}

// FuzzParseResponseHead: ParseResponseHead never panics, and a head it
// takes net/http's http.ReadResponse reads the same way: status, protocol,
// headers (ToHeader), length, chunking and whether the connection closes.
func FuzzParseResponseHead(f *testing.F) {
	f.Add([]byte(plainAnswer))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nConnection: keep-alive, close\r\n\r\n"))
	f.Add([]byte("HTTP/1.0 404   Not Found\r\nConnection: keep-alive\r\nA: 1\r\na: 2\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\nX:\t \r\n\r\n"))
	f.Add([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h ResponseHead
		n, err := ParseResponseHead(b, &h)
		if err != nil {
			return
		}
		want, herr := http.ReadResponse(bufio.NewReader(strings.NewReader(string(b[:n]))), nil)
		if herr != nil {
			t.Fatalf("ParseResponseHead took %q, net/http refuses it: %v", b[:n], herr)
		}
		got := h.response(nil)
		if got.StatusCode != want.StatusCode || got.Status != want.Status || got.Proto != want.Proto ||
			got.ProtoMinor != want.ProtoMinor || got.ContentLength != want.ContentLength || got.Close != want.Close ||
			!reflect.DeepEqual(got.TransferEncoding, want.TransferEncoding) {
			t.Fatalf("%q: got status %d %q %s length %d close %v te %q, net/http %d %q %s %d %v %q", b[:n],
				got.StatusCode, got.Status, got.Proto, got.ContentLength, got.Close, got.TransferEncoding,
				want.StatusCode, want.Status, want.Proto, want.ContentLength, want.Close, want.TransferEncoding)
		}
		if len(got.Header) != len(want.Header) || (len(got.Header) > 0 && !reflect.DeepEqual(got.Header, want.Header)) {
			t.Fatalf("%q: got header %q, net/http %q", b[:n], got.Header, want.Header)
		}
	})
}

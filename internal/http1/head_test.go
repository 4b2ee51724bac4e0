package http1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

const plainHead = "POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n"

func TestParseHeadTakesAPlainRequest(t *testing.T) {
	b := []byte("POST /v1/acquire HTTP/1.1\r\nhost: x\r\nAUTHORIZATION:  Bearer t0k \r\nContent-length: 12\r\nConnection: Close\r\n\r\n{\"tenant\":1}")
	var req Request
	n, err := ParseHead(b, 1<<20, &req)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[n:]) != `{"tenant":1}` || string(req.Path) != "/v1/acquire" || string(req.Authorization) != "Bearer t0k" ||
		req.ContentLength != 12 || !req.Close {
		t.Fatalf("n %d path %q auth %q length %d close %v", n, req.Path, req.Authorization, req.ContentLength, req.Close)
	}
}

// TestParseHeadLeavesTheRestToNetHTTP: every head outside the plain subset
// is ErrNotPlain (net/http answers it), an unfinished one ErrIncomplete.
func TestParseHeadLeavesTheRestToNetHTTP(t *testing.T) {
	for _, c := range []struct{ name, head string }{
		{"GET", strings.Replace(plainHead, "POST", "GET", 1)},
		{"HTTP/1.0", strings.Replace(plainHead, "HTTP/1.1", "HTTP/1.0", 1)},
		{"query", strings.Replace(plainHead, "acquire", "acquire?x=1", 1)},
		{"escape", strings.Replace(plainHead, "acquire", "acq%75ire", 1)},
		{"absolute form", strings.Replace(plainHead, "/v1", "http://x/v1", 1)},
		{"no host", strings.Replace(plainHead, "Host: x\r\n", "", 1)},
		{"two hosts", strings.Replace(plainHead, "Host: x\r\n", "Host: x\r\nHost: y\r\n", 1)},
		{"no length", strings.Replace(plainHead, "Content-Length: 12\r\n", "", 1)},
		{"two lengths", strings.Replace(plainHead, "Content-Length: 12\r\n", "Content-Length: 12\r\nContent-Length: 12\r\n", 1)},
		{"signed length", strings.Replace(plainHead, ": 12", ": +12", 1)},
		{"length over max", strings.Replace(plainHead, ": 12", ": 2000000", 1)},
		{"chunked", strings.Replace(plainHead, "Host: x", "Host: x\r\nTransfer-Encoding: chunked", 1)},
		{"expect", strings.Replace(plainHead, "Host: x", "Host: x\r\nExpect: 100-continue", 1)},
		{"upgrade", strings.Replace(plainHead, "Host: x", "Host: x\r\nUpgrade: websocket", 1)},
		{"connection list", strings.Replace(plainHead, "Host: x", "Host: x\r\nConnection: keep-alive, Upgrade", 1)},
		{"two authorizations", strings.Replace(plainHead, "Host: x", "Host: x\r\nAuthorization: a\r\nAuthorization: b", 1)},
		{"folded", strings.Replace(plainHead, "Host: x", "Host: x\r\n more", 1)},
		{"bad name", strings.Replace(plainHead, "Host: x", "Host: x\r\nBad Name: 1", 1)},
		{"no colon", strings.Replace(plainHead, "Host: x", "Host: x\r\nnocolon", 1)},
		{"control in value", strings.Replace(plainHead, "Host: x", "Host: x\x01", 1)},
		{"bare LF", strings.Replace(plainHead, "Host: x\r\n", "Host: x\n", 1)},
	} {
		var req Request
		if _, err := ParseHead([]byte(c.head), 1<<20, &req); !errors.Is(err, ErrNotPlain) {
			t.Errorf("%s: %v, want ErrNotPlain", c.name, err)
		}
	}
	var req Request
	if _, err := ParseHead([]byte(plainHead[:len(plainHead)-2]), 1<<20, &req); !errors.Is(err, ErrIncomplete) {
		t.Errorf("unfinished head: %v, want ErrIncomplete", err)
	}
}

// FuzzParseHead compares every head ParseHead takes or refuses with what
// net/http makes of the same bytes. ParseHead never panics; a head it
// takes (with its body) a net/http server serves too, reading it the same
// way: POST, the same path, body length, Authorization and Connection:
// close (not a 400 for a Host, a header or a line ending it would refuse);
// a head it finds unfinished net/http finds unfinished too (no answer yet:
// a bare LF it would read as a line's end is refused instead, ErrNotPlain);
// a head it refuses (ErrNotPlain) goes to net/http untouched, whose
// verdict is then the answer, whatever it is.
func FuzzParseHead(f *testing.F) {
	f.Add([]byte(plainHead + "{\"tenant\":1}"))
	f.Add([]byte("POST /v1/batch HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nHost:\r\nContent-Length: 00\r\nX: \t\r\n\r\n"))
	for _, host := range []string{"a b/c", "a/b", "[::1]:80", "x:80", "a\"b", "{a}", "a%20b", "h_o~st!$&'()*+,;=", "\t"} {
		f.Add([]byte("POST /v1/acquire HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 2\r\n\r\n{}"))
	}
	for _, head := range []string{
		"POST /v1/acquire HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}",
		"POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\n{}",
		"POST /v1/acquire HTTP/1.1\r\nHost: x\nContent-Length: 2\r\n\r\n{}",
		"POST /v1/acquire HTTP/1.1\r\nHost: x\r\n",
		"POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r",
		"POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\r\n\r\n{}",
	} {
		f.Add([]byte(head))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req Request
		n, err := ParseHead(b, 1<<20, &req)
		switch {
		case errors.Is(err, ErrIncomplete):
			// net/http's verdict on the lines ended so far: a line not yet
			// ended is one it waits for too.
			lines := b[:bytes.LastIndexByte(b, '\n')+1]
			if _, herr := http.ReadRequest(bufio.NewReader(bytes.NewReader(lines))); !errors.Is(herr, io.ErrUnexpectedEOF) && !errors.Is(herr, io.EOF) {
				t.Fatalf("ParseHead waits for more of %q; net/http has its answer: %v", b, herr)
			}
			return
		case err != nil:
			return // ErrNotPlain: net/http's to answer, the bytes untouched
		}
		raw := append(append([]byte(nil), b[:n]...), make([]byte, req.ContentLength)...)
		want := netHTTPVerdict(t, raw)
		if !want.handled || want.status != http.StatusNoContent {
			t.Fatalf("ParseHead took %q, a net/http server answers it %d without serving it", b[:n], want.status)
		}
		if want.method != http.MethodPost || want.path != string(req.Path) || want.length != req.ContentLength ||
			want.auth != string(req.Authorization) || want.close != req.Close {
			t.Fatalf("%q: ParseHead path %q length %d auth %q close %v; net/http %s %q length %d auth %q close %v",
				b[:n], req.Path, req.ContentLength, req.Authorization, req.Close,
				want.method, want.path, want.length, want.auth, want.close)
		}
	})
}

// TestEachHeaderWalksTheHead: EachHeader gives every header line of a head
// ParseHead took, in order, values trimmed.
func TestEachHeaderWalksTheHead(t *testing.T) {
	b := []byte("POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key:  k1 \r\nAnthropic-Version: 2023-06-01\r\nContent-Length: 2\r\n\r\n{}")
	var req Request
	if _, err := ParseHead(b, 1<<20, &req); err != nil {
		t.Fatal(err)
	}
	var got []string
	req.EachHeader(func(name, value []byte) { got = append(got, string(name)+"="+string(value)) })
	want := "[Host=x x-api-key=k1 Anthropic-Version=2023-06-01 Content-Length=2]"
	if fmt.Sprint(got) != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}

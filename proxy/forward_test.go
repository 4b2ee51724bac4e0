package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// TestCopyHeader: end-to-end headers are copied, hop-by-hop ones, those the
// Connection header names and those skip names are not, and the copies
// share nothing with the source or with each other.
func TestCopyHeader(t *testing.T) {
	src := http.Header{
		"Content-Type": {"application/json"},
		"X-Multi":      {"a", "b"},
		"X-One":        {"1"},
		"Keep-Alive":   {"timeout=5"},
		"Connection":   {"X-Private, keep-alive"},
		"X-Private":    {"p"},
		"X-Skipped":    {"s"},
	}
	orig := src.Clone()
	dst := http.Header{"X-Kept": {"k"}}
	copyHeader(dst, src, func(k string) bool { return k == "X-Skipped" })
	want := http.Header{"X-Kept": {"k"}, "Content-Type": {"application/json"}, "X-Multi": {"a", "b"}, "X-One": {"1"}}
	if !reflect.DeepEqual(dst, want) {
		t.Fatalf("copied %v, want %v", dst, want)
	}
	dst["X-Multi"][0] = "changed"
	for k := range dst {
		dst.Add(k, "added") // appends: must not run into another header's values
	}
	if !reflect.DeepEqual(src, orig) {
		t.Fatalf("source changed to %v", src)
	}
	want["X-Multi"][0] = "changed"
	for k := range want {
		want[k] = append(want[k], "added")
	}
	if !reflect.DeepEqual(dst, want) {
		t.Fatalf("after an append to every header: %v, want %v", dst, want)
	}
}

// TestReadAnswer: a body is read whole whatever its Content-Length says
// (exact, unknown, shorter than the body), and cut at maxAnswer+1 bytes.
func TestReadAnswer(t *testing.T) {
	body := strings.Repeat("x", 1000)
	for _, tc := range []struct {
		name   string
		length int64
	}{{"exact", 1000}, {"unknown", -1}, {"announced shorter", 10}, {"announced empty", 0}} {
		resp := &http.Response{ContentLength: tc.length, Body: io.NopCloser(strings.NewReader(body))}
		got, err := readAnswer(resp)
		if err != nil || string(got) != body {
			t.Errorf("%s: read %d bytes, %v; want %d", tc.name, len(got), err, len(body))
		}
	}
	resp := &http.Response{ContentLength: maxAnswer, Body: io.NopCloser(bytes.NewReader(make([]byte, maxAnswer+10)))}
	if got, err := readAnswer(resp); err != nil || len(got) != maxAnswer+1 {
		t.Errorf("over maxAnswer: read %d bytes, %v; want %d", len(got), err, maxAnswer+1)
	}
	cut := errors.New("cut")
	resp = &http.Response{ContentLength: 1000, Body: io.NopCloser(io.MultiReader(strings.NewReader("abc"), errReader{cut}))}
	if got, err := readAnswer(resp); !errors.Is(err, cut) || string(got) != "abc" {
		t.Errorf("cut body: %q, %v; want abc, cut", got, err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

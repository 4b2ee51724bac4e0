package http1

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
)

// answerBody is the size of an acquire's answer.
var answerBody = []byte(`{"allowed":true,"lease":"AgDQj7T0h7e_qHYAAWEACHZtLTE4MDgxBCh9DKp3pCLU3vCYXk_X2pWYOBqRvGv4C4Q86VBeSYs","reserved_tokens":30,"limits":{"requests":{"limit":60,"remaining":59,"reset_ms":60262},"tokens":{"limit":100000,"remaining":99970,"reset_ms":60262},"concurrency":{"limit":10,"remaining":9,"reset_ms":120000}},"owner":"n1"}` + "\n")

// BenchmarkServer answers a fixed acquire-sized body to parallel
// kept-alive connections over loopback: /plain through Server's fast path,
// /nethttp the same through net/http (the Handler declines it, so the
// connection is net/http's from its first request). The client side is the
// same raw HTTP/1.1 for both; ns/op is client and server together.
func BenchmarkServer(b *testing.B) {
	for _, path := range []string{"/plain", "/nethttp"} {
		b.Run(path[1:], func(b *testing.B) {
			s := NewServer(Config{
				Handler: func(_ context.Context, req *Request, resp *Response) bool {
					if string(req.Path) != "/plain" {
						return false
					}
					resp.Status = http.StatusOK
					resp.AddHeader("Content-Type", "application/json")
					resp.Body = append(resp.Body, answerBody...)
					return true
				},
				Fallback: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write(answerBody)
				})},
			})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = s.Serve(ln) }()
			defer func() { _ = s.Shutdown(context.Background()) }()
			body := `{"tenant":"t1","model":"gpt-4o-mini","prompt_tokens":100,"max_tokens":100}`
			req := []byte("POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
				strconv.Itoa(len(body)) + "\r\n\r\n" + body)
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				br := bufio.NewReader(c)
				for pb.Next() {
					if _, err := c.Write(req); err != nil {
						b.Error(err)
						return
					}
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}

package main

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProxiesForward: the reference proxy and the relay pass a request to
// the upstream (path, body and headers) and its answer back, and stop
// closes them (the relay with a client's kept-alive connection still open).
func TestProxiesForward(t *testing.T) {
	for name, start := range map[string]func(string) (string, func(), error){"reference": referenceProxy, "relay": relay} {
		t.Run(name, func(t *testing.T) {
			var got []string
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(body))
				w.Header().Set("X-Upstream", "1")
				w.WriteHeader(http.StatusTeapot)
				_, _ = io.WriteString(w, "answer")
			}))
			defer up.Close()
			addr, stop, err := start(up.URL)
			if err != nil {
				t.Fatal(err)
			}
			req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(`{"a":1}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer k")
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if name == "reference" {
				client.CloseIdleConnections() // net/http's Close does not wait for them
			}
			if resp.StatusCode != http.StatusTeapot || string(body) != "answer" || resp.Header.Get("X-Upstream") != "1" {
				t.Errorf("answer %d %q %v, want 418 \"answer\" with X-Upstream", resp.StatusCode, body, resp.Header)
			}
			if want := `POST /v1/chat/completions Bearer k {"a":1}`; len(got) != 1 || got[0] != want {
				t.Errorf("upstream saw %q, want [%q]", got, want)
			}
			stop()
			if _, err := http.Get("http://" + addr + "/"); err == nil {
				t.Error("it still answers after stop")
			}
		})
	}
}

// TestExplainNamesTheDeadServer: a failed run's error says which server
// exited, how, and what it wrote last; a live one is not mentioned.
func TestExplainNamesTheDeadServer(t *testing.T) {
	dead, err := startServer("dead", "", "sh", "-c", "echo panic: something broke; exit 2")
	if err != nil {
		t.Fatal(err)
	}
	live, err := startServer("live", "", "sleep", "30")
	if err != nil {
		t.Fatal(err)
	}
	defer live.stop()
	<-dead.done
	defer dead.stop()
	ss := servers{dead, live}
	if ss.explain(nil) != nil {
		t.Error("explain(nil) is not nil")
	}
	got := ss.explain(errors.New("run failed")).Error()
	for _, want := range []string{"run failed", "dead exited (exit status 2)", "panic: something broke"} {
		if !strings.Contains(got, want) {
			t.Errorf("explain: %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "live") {
		t.Errorf("explain mentions the live server: %q", got)
	}
}

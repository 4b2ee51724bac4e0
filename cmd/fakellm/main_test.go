package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is an output that the test reads while run writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var servingRE = regexp.MustCompile(`^fakellm: serving (http://\S+/v1)\n`)

// serve runs fakellm with args on a free port and returns its base URL and
// its stderr; it stops when the test ends, and must stop cleanly.
func serve(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), &stdout, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := servingRE.FindStringSubmatch(stdout.String()); m != nil {
			return m[1], &stderr
		}
	}
	t.Fatalf("fakellm did not say where it serves; stderr: %s", stderr.String())
	return "", nil
}

func post(t *testing.T, url string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// fakellm serves the test fake: OpenAI's whole answer and Anthropic's
// stream, with the usage and text of its flags, and logs each request.
func TestServesBothShapes(t *testing.T) {
	base, stderr := serve(t, "-prompt-tokens", "5", "-completion-tokens", "2", "-text", "a|b")
	code, body := post(t, base+"/chat/completions", nil, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	var whole struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &whole); code != 200 || err != nil || len(whole.Choices) != 1 ||
		whole.Choices[0].Message.Content != "ab" || whole.Usage.PromptTokens != 5 || whole.Usage.CompletionTokens != 2 {
		t.Fatalf("OpenAI answer %d %s (%v)", code, body, err)
	}
	code, body = post(t, base+"/messages", nil, `{"model":"claude","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`)
	for _, want := range []string{"event: message_start", `"input_tokens":5`, `"text":"a"`, `"text":"b"`,
		"event: message_delta", `"output_tokens":2`, "event: message_stop"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("Anthropic stream %d lacks %q:\n%s", code, want, body)
		}
	}
	if log := stderr.String(); !strings.Contains(log, "fakellm: POST /v1/chat/completions\n") || !strings.Contains(log, "fakellm: POST /v1/messages\n") {
		t.Errorf("stderr %q: want one line per request", log)
	}
}

// With -api-key, a request without the key is refused as a provider would.
func TestAPIKey(t *testing.T) {
	base, _ := serve(t, "-api-key", "sk-up")
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	if code, b := post(t, base+"/chat/completions", map[string]string{"Authorization": "Bearer sk-wrong"}, body); code != 401 {
		t.Errorf("wrong key: %d %s, want 401", code, b)
	}
	if code, b := post(t, base+"/chat/completions", map[string]string{"Authorization": "Bearer sk-up"}, body); code != 200 {
		t.Errorf("right key: %d %s, want 200", code, b)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-nope"}, {"extra"}, {"-prompt-tokens", "-1"}} {
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("%q: want an error", args)
		}
	}
}

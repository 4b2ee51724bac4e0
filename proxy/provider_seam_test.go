package proxy

// The provider seam (provider.go): a third API shape, defined here in the
// test only, goes through the shared proxy path (Server.proxy, forward,
// relayBody, relayStream, renewal, settling) with no change to it. The
// "ledger" provider has its own request shape (engine, input, budget), its
// own usage field (metering.in_units and out_units), its own stream events
// and its own error shape ({"problem":{...}}); nothing of it is OpenAI's or
// Anthropic's.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/prompt"
	"github.com/tokenring/tokenring/router"
)

// ledger is the third provider. The value carries its upstream, which
// Config has no field for.
type ledger struct{ up Upstream }

func (ledger) name() string { return "ledger" }

func (l ledger) upstream(Config) (Upstream, string) { return l.up, "/generate" }

func (ledger) authorize(h http.Header, key string) { h.Set("X-Ledger-Key", key) }

// ledgerRequest is the ledger's request: no model, messages or max_tokens.
type ledgerRequest struct {
	Engine string `json:"engine"`
	Input  []struct {
		Speaker string `json:"speaker"`
		Text    string `json:"text"`
	} `json:"input"`
	Budget *int64 `json:"budget"`
	Live   bool   `json:"live"` // stream the answer
}

func (ledger) parse(c *proxyCall, body []byte) error {
	var in ledgerRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return fmt.Errorf("invalid JSON body: %v", err)
	}
	if err := router.CheckName("engine", in.Engine, true); err != nil {
		return err
	}
	if len(in.Input) == 0 {
		return errors.New("input is required")
	}
	if err := c.setMaxTokens("budget", in.Budget); err != nil {
		return err
	}
	var text []string
	for _, m := range in.Input {
		text = append(text, m.Text)
	}
	c.model, c.stream, c.body = in.Engine, in.Live, body
	joined := strings.Join(text, "\n")
	c.setCount(len(joined), func(k router.Counter) int { return k.Text(in.Engine, joined) })
	return nil
}

// ledgerProblems are the ledger's error codes by kind.
var ledgerProblems = [...]string{
	errInvalid:      "bad_request",
	errAuth:         "unauthenticated",
	errTooLarge:     "too_big",
	errOverloaded:   "busy",
	errServer:       "broken",
	errRateRequests: "throttled",
	errRateTokens:   "throttled_tokens",
}

func (ledger) fail(w http.ResponseWriter, e apiError) {
	writeJSON(w, e.status, map[string]any{"problem": map[string]string{"code": ledgerProblems[e.kind], "detail": e.msg}})
}

// ledgerMetering is the ledger's usage field.
type ledgerMetering struct {
	InUnits  int64 `json:"in_units"`
	OutUnits int64 `json:"out_units"`
}

func (m *ledgerMetering) addTo(s *usageSeen) {
	s.prompt, s.promptSet = m.InUnits, true
	s.completion, s.final = m.OutUnits, true
}

func (ledger) readAnswer(s *usageSeen, raw []byte) bool {
	var a struct {
		Output   string          `json:"output"`
		Metering *ledgerMetering `json:"metering"`
	}
	if json.Unmarshal(raw, &a) != nil {
		return false
	}
	s.addText(a.Output)
	if a.Metering != nil {
		a.Metering.addTo(s)
	}
	return true
}

// readEvent: "piece" events carry text, "done" the metering and the end.
func (ledger) readEvent(_ *proxyCall, s *usageSeen, data []byte) (end, pass bool) {
	var e struct {
		Kind     string          `json:"kind"`
		Text     string          `json:"text"`
		Metering *ledgerMetering `json:"metering"`
	}
	if json.Unmarshal(data, &e) != nil {
		return false, true
	}
	switch e.Kind {
	case "piece":
		s.addText(e.Text)
	case "done":
		if e.Metering != nil {
			e.Metering.addTo(s)
		}
		return true, true
	}
	return false, true
}

// wordCounter counts a token per word, so that the expected reservations
// are plain to see.
type wordCounter struct{}

func (wordCounter) Text(_, text string) int { return len(strings.Fields(text)) }

func (wordCounter) Messages(string, []prompt.Message) int { panic("the ledger counts text only") }

// fakeLedger is the ledger's upstream: a whole answer, or a stream when the
// request says "live", each with its own metering.
type fakeLedger struct {
	key string

	mu   sync.Mutex // guards body
	body []string   // the requests' bodies, in order
}

func (f *fakeLedger) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	raw, _ := io.ReadAll(req.Body)
	f.mu.Lock()
	f.body = append(f.body, string(raw))
	f.mu.Unlock()
	if req.URL.Path != "/generate" || req.Header.Get("X-Ledger-Key") != f.key || req.Header.Get("Authorization") != "" {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	if !bytes.Contains(raw, []byte(`"live":true`)) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"output":"hello there","metering":{"in_units":7,"out_units":11}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range []string{`{"kind":"piece","text":"hel"}`, `{"kind":"piece","text":"lo"}`, `{"kind":"done","metering":{"in_units":7,"out_units":3}}`} {
		_, _ = fmt.Fprintf(w, "data: %s\n\n", ev)
		w.(http.Flusher).Flush()
	}
}

func (f *fakeLedger) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.body...)
}

// TestProviderSeamThirdShape: the ledger, served through Server.proxy,
// is admitted on the tenant's limits, forwarded with its own credentials,
// settled from its own usage field (whole answers and streams), and refused
// in its own error shape.
func TestProviderSeamThirdShape(t *testing.T) {
	const (
		tpm       = 1000
		clientKey = "sk-acme"
		upKey     = "lk-upstream"
	)
	fake := &fakeLedger{key: upKey}
	up := httptest.NewServer(fake)
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 2, Tokens: tpm, Concurrency: 5, Window: time.Minute}
	}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	s, r := newServer(t, n, router.Config{Limits: limits}, Config{
		Tenant: func(key string) (string, bool) { return "acme", key == clientKey },
		Client: up.Client(),
	}, wordCounter{})
	// The only registration there is: a route to the shared path with the
	// new value (Routes does the same for openAI{} and anthropic{}).
	mux := http.NewServeMux()
	p := ledger{up: Upstream{BaseURL: up.URL, APIKey: upKey}}
	mux.HandleFunc("/v1/ledger", func(w http.ResponseWriter, req *http.Request) { s.proxy(w, req, p) })
	hs := httptest.NewServer(mux)
	t.Cleanup(func() {
		hs.Close()
		up.Close()
	})

	post := func(key, body string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, hs.URL+"/v1/ledger", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header, string(b)
	}
	tokensLeft := func() (requests, tokens, slots int64) {
		t.Helper()
		levels, _, err := r.Levels(context.Background(), "acme", "")
		if err != nil {
			t.Fatal(err)
		}
		st := levels[0].Status
		return st.Requests.Remaining, st.Tokens.Remaining, st.Concurrency.Remaining
	}
	problem := func(body string) (code, detail string) {
		t.Helper()
		var e struct{ Problem struct{ Code, Detail string } }
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			t.Fatalf("%q is not the ledger's error shape: %v", body, err)
		}
		return e.Problem.Code, e.Problem.Detail
	}
	// 5 words of input (wordCounter) and a budget of 40: 45 reserved.
	const ask = `{"engine":"ledger-1","input":[{"speaker":"user","text":"one two three four five"}],"budget":40%s}`

	// Its own mistakes, in its own shape, reserving nothing.
	if code, _, body := post("sk-nope", fmt.Sprintf(ask, "")); code != 401 {
		t.Fatalf("unknown key: %d %s", code, body)
	} else if c, _ := problem(body); c != "unauthenticated" {
		t.Fatalf("unknown key: %s", body)
	}
	if code, _, body := post(clientKey, `{"engine":"ledger-1","input":[]}`); code != 400 {
		t.Fatalf("no input: %d %s", code, body)
	} else if c, d := problem(body); c != "bad_request" || d != "input is required" {
		t.Fatalf("no input: %s", body)
	}

	// Admitted and settled from metering: 7 in + 11 out, not the 45
	// reserved, nor the 5 + 2 words it could count.
	code, hdr, body := post(clientKey, fmt.Sprintf(ask, ""))
	if code != 200 || body != `{"output":"hello there","metering":{"in_units":7,"out_units":11}}` {
		t.Fatalf("whole answer: %d %s", code, body)
	}
	if got := hdr.Get("x-ratelimit-remaining-requests"); got != "1" {
		t.Errorf("x-ratelimit-remaining-requests %q, want 1", got)
	}
	if req, tok, slots := tokensLeft(); req != 1 || tok != tpm-18 || slots != 5 {
		t.Fatalf("after the whole answer: requests %d, tokens %d, slots %d; want 1, %d, 5", req, tok, slots, tpm-18)
	}

	// A stream settles from its "done" event's metering: 7 + 3.
	code, _, body = post(clientKey, fmt.Sprintf(ask, `,"live":true`))
	if code != 200 || !strings.Contains(body, `"kind":"done"`) || strings.Count(body, "data: ") != 3 {
		t.Fatalf("stream: %d %q", code, body)
	}
	if req, tok, slots := tokensLeft(); req != 0 || tok != tpm-18-10 || slots != 5 {
		t.Fatalf("after the stream: requests %d, tokens %d, slots %d; want 0, %d, 5", req, tok, slots, tpm-28)
	}

	// The third request is over the tenant's 2: refused in the ledger's
	// shape, never forwarded.
	code, hdr, body = post(clientKey, fmt.Sprintf(ask, ""))
	if code != 429 || hdr.Get("x-tokenring-reason") != "requests" || hdr.Get("retry-after") == "" {
		t.Fatalf("refusal: %d %v %s", code, hdr, body)
	}
	if c, d := problem(body); c != "throttled" || !strings.Contains(d, "tenant acme on requests") {
		t.Fatalf("refusal: %s", body)
	}
	reqs := fake.requests()
	if len(reqs) != 2 {
		t.Fatalf("the upstream got %d requests, want the 2 admitted", len(reqs))
	}
	if reqs[0] != fmt.Sprintf(ask, "") {
		t.Errorf("forwarded %q, want the client's body as it came", reqs[0])
	}
	if req, tok, slots := tokensLeft(); req != 0 || tok != tpm-28 || slots != 5 {
		t.Fatalf("after the refusal: requests %d, tokens %d, slots %d; want 0, %d, 5", req, tok, slots, tpm-28)
	}
}

package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
)

// slot is one decoded result of POST /v1/batch.
type slot struct {
	Status       int             `json:"status"`
	Body         json.RawMessage `json:"body"`
	RetryAfterMS int64           `json:"retry_after_ms"`
}

// reply decodes the slot's body as the single endpoint's answer.
func (s slot) reply(t testing.TB) reply {
	t.Helper()
	r := reply{Code: s.Status}
	if err := json.Unmarshal(s.Body, &r); err != nil {
		t.Fatalf("slot body %q: %v", s.Body, err)
	}
	return r
}

// batch posts calls as one /v1/batch; the slots are nil unless it answered 200.
func (s *server) batch(t testing.TB, calls ...string) (reply, []slot) {
	t.Helper()
	r, raw := s.send(t, http.MethodPost, "/v1/batch", `{"calls":[`+strings.Join(calls, ",")+`]}`)
	if r.Code != http.StatusOK {
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("batch: %d %q is not JSON", r.Code, raw)
		}
		return r, nil
	}
	var out struct {
		Results []slot `json:"results"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("batch: %q: %v", raw, err)
	}
	if len(out.Results) != len(calls) {
		t.Fatalf("batch: %d results for %d calls", len(out.Results), len(calls))
	}
	return r, out.Results
}

func statuses(slots []slot) []int {
	out := make([]int, len(slots))
	for i, s := range slots {
		out[i] = s.Status
	}
	return out
}

// TestBatchOrderAndStatuses: each call is answered in its own slot, in the
// calls' order; bad calls in the middle are 400s that change nothing, the
// others run; a 429's body is byte for byte what /v1/acquire answers.
func TestBatchOrderAndStatuses(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	s := start(t, setup{
		tenants: map[string]limiter.Limits{"open": {Requests: 100}, "shut": {Requests: 1}},
		now:     func() time.Time { return t0 },
	})
	if r := s.acquire(t, `{"tenant":"shut","prompt_tokens":1}`); !r.Allowed {
		t.Fatalf("first acquire for shut: %+v", r)
	}
	_, slots := s.batch(t,
		`{"op":"acquire","tenant":"open","prompt_tokens":1}`,
		`{"op":"frobnicate","tenant":"open"}`,
		`{"op":"acquire","tenant":"shut","prompt_tokens":1}`,
		`{"op":"acquire","tenant":"","prompt_tokens":1}`,
		`{"op":"acquire","tenant":"open","prompt_tokens":1,"colour":"red"}`,
		`{"tenant":"open","prompt_tokens":1}`,
		`{"op":"renew","tenant":"open","lease":"x","usage":{}}`,
		`{"op":"acquire","tenant":"open","prompt_tokens":1,"max_tokens":7}`,
	)
	want := []int{200, 400, 429, 400, 400, 400, 400, 200}
	if got := statuses(slots); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	if r := slots[0].reply(t); !r.Allowed || r.Lease == "" || r.Limits.Requests.Limit != 100 {
		t.Fatalf("slot 0: %+v, want allowed under open's limit of 100", r)
	}
	if r := slots[7].reply(t); !r.Allowed || r.ReservedTokens != 8 {
		t.Fatalf("slot 7: %+v, want allowed reserving 8 tokens", r)
	}
	for _, i := range []int{1, 3, 4, 5, 6} {
		if r := slots[i].reply(t); r.Error == "" || r.Allowed {
			t.Fatalf("slot %d: %+v, want an error", i, r)
		}
	}
	if !strings.Contains(slots[1].reply(t).Error, `"frobnicate"`) || !strings.Contains(slots[6].reply(t).Error, "renew takes no usage") {
		t.Fatalf("errors %q, %q: want the unknown op and the renew's usage named", slots[1].reply(t).Error, slots[6].reply(t).Error)
	}
	if r := s.status(t, "open"); r.Limits.Requests.Remaining != 98 {
		t.Fatalf("open has %d requests left, want 98: the bad calls must change nothing", r.Limits.Requests.Remaining)
	}
	single := s.acquire(t, `{"tenant":"shut","prompt_tokens":1}`) // the clock stands still: the same answer again
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/acquire", strings.NewReader(`{"tenant":"shut","prompt_tokens":1}`))
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(bytes.TrimSpace(body), slots[2].Body) || slots[2].RetryAfterMS != single.RetryAfterMS || single.RetryAfterMS <= 0 {
		t.Fatalf("batch 429 %s retry_after_ms %d\nsingle    %s retry_after_ms %d: want the same", slots[2].Body, slots[2].RetryAfterMS, body, single.RetryAfterMS)
	}
}

// TestBatchLeaseCalls: complete and renew through a batch settle and renew
// as the single endpoints do.
func TestBatchLeaseCalls(t *testing.T) {
	s := start(t, setup{tenants: map[string]limiter.Limits{"acme": {Tokens: 1000, Concurrency: 5}}})
	_, got := s.batch(t,
		`{"op":"acquire","tenant":"acme","prompt_tokens":100,"max_tokens":100}`,
		`{"op":"acquire","tenant":"acme","prompt_tokens":100,"max_tokens":100}`)
	l1, l2 := got[0].reply(t).Lease, got[1].reply(t).Lease
	if l1 == "" || l2 == "" {
		t.Fatalf("acquires: %s %s", got[0].Body, got[1].Body)
	}
	if r := s.status(t, "acme"); r.Limits.Tokens.Remaining != 600 || r.Limits.Concurrency.Remaining != 3 {
		t.Fatalf("after two acquires: %+v, want 600 tokens and 3 slots left", r.Limits)
	}
	_, got = s.batch(t,
		fmt.Sprintf(`{"op":"complete","tenant":"acme","lease":%q,"usage":{"prompt_tokens":100,"completion_tokens":10}}`, l1),
		fmt.Sprintf(`{"op":"renew","tenant":"acme","lease":%q}`, l2),
		fmt.Sprintf(`{"op":"complete","tenant":"acme","lease":%q}`, l2+"x"))
	if fmt.Sprint(statuses(got)) != "[200 200 400]" {
		t.Fatalf("statuses %v, want [200 200 400]: %s", statuses(got), got[2].Body)
	}
	if r := got[0].reply(t); !r.Settled {
		t.Fatalf("complete: %s", got[0].Body)
	}
	if r := got[1].reply(t); !r.Renewed {
		t.Fatalf("renew: %s", got[1].Body)
	}
	if r := s.status(t, "acme"); r.Limits.Tokens.Remaining != 690 || r.Limits.Concurrency.Remaining != 4 {
		t.Fatalf("after the settle: %+v, want 690 tokens (90 credited back) and 4 slots left", r.Limits)
	}
	_, got = s.batch(t, fmt.Sprintf(`{"op":"renew","tenant":"acme","lease":%q}`, l1))
	if got[0].Status != http.StatusNotFound {
		t.Fatalf("renewing a completed lease: %d %s, want 404", got[0].Status, got[0].Body)
	}
}

// TestBatchWaitsConcurrently: a call's wait_ms works as on /v1/acquire, and
// the calls of a batch run concurrently: the waiting acquire gets the slot
// the complete beside it frees.
func TestBatchWaitsConcurrently(t *testing.T) {
	s := start(t, setup{tenants: map[string]limiter.Limits{"acme": {Concurrency: 1}}})
	held := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`)
	if !held.Allowed {
		t.Fatalf("first acquire: %+v", held)
	}
	_, got := s.batch(t,
		`{"op":"acquire","tenant":"acme","prompt_tokens":1,"wait_ms":5000}`,
		fmt.Sprintf(`{"op":"complete","tenant":"acme","lease":%q}`, held.Lease))
	if fmt.Sprint(statuses(got)) != "[200 200]" || !got[0].reply(t).Allowed {
		t.Fatalf("statuses %v: %s, want the waiting acquire admitted", statuses(got), got[0].Body)
	}
}

// TestBatchCallCap: 1000 calls are answered; 1001 are a 400 naming the cap,
// and admit nothing; a body over 1 MiB is a 413.
func TestBatchCallCap(t *testing.T) {
	s := start(t, setup{tenants: map[string]limiter.Limits{"acme": {Requests: 5000}}})
	call := `{"op":"acquire","tenant":"acme","prompt_tokens":1}`
	calls := make([]string, 1001)
	for i := range calls {
		calls[i] = call
	}
	r, _ := s.batch(t, calls...)
	if r.Code != http.StatusBadRequest || !strings.Contains(r.Error, "at most 1000 calls") {
		t.Fatalf("1001 calls: %d %q, want 400 naming the cap of 1000", r.Code, r.Error)
	}
	if st := s.status(t, "acme"); st.Limits.Requests.Remaining != 5000 {
		t.Fatalf("a refused batch admitted %d", 5000-st.Limits.Requests.Remaining)
	}
	_, got := s.batch(t, calls[:1000]...)
	for i, g := range got {
		if g.Status != http.StatusOK {
			t.Fatalf("slot %d of 1000: %d %s", i, g.Status, g.Body)
		}
	}
	if st := s.status(t, "acme"); st.Limits.Requests.Remaining != 4000 {
		t.Fatalf("1000 calls left %d requests, want 4000", st.Limits.Requests.Remaining)
	}
	big := `{"op":"acquire","tenant":"acme","prompt":"` + strings.Repeat("a", router.MaxBody) + `"}`
	if r, _ := s.batch(t, big); r.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over 1 MiB: %d %q, want 413", r.Code, r.Error)
	}
}

// TestBatchExactAdmission: 100 acquires in one batch for a tenant allowed
// 40 requests a minute admit exactly 40.
func TestBatchExactAdmission(t *testing.T) {
	s := start(t, setup{tenants: map[string]limiter.Limits{"acme": {Requests: 40}}})
	calls := make([]string, 100)
	for i := range calls {
		calls[i] = `{"op":"acquire","tenant":"acme","prompt_tokens":1}`
	}
	_, got := s.batch(t, calls...)
	allowed, refused := 0, 0
	for _, g := range got {
		r := g.reply(t)
		switch {
		case g.Status == http.StatusOK && r.Allowed:
			allowed++
		case g.Status == http.StatusTooManyRequests && r.Reason == "requests" && g.RetryAfterMS > 0:
			refused++
		}
	}
	if allowed != 40 || refused != 60 {
		t.Fatalf("allowed %d refused %d, want exactly 40 and 60", allowed, refused)
	}
}

// TestBatchClientTokens: the batch's token is checked once (401 for the
// whole batch) and per call's tenant (403 in that slot only).
func TestBatchClientTokens(t *testing.T) {
	s := start(t, setup{
		tenants: map[string]limiter.Limits{"": {Requests: 10}},
		clients: map[string][]string{"gw-all": {AnyTenant}, "gw-eve": {"eve"}},
	})
	anon, wrong, eve, gw := *s, *s, *s, *s
	wrong.token, eve.token, gw.token = "gw-al", "gw-eve", "gw-all"
	calls := []string{`{"op":"acquire","tenant":"eve","prompt_tokens":1}`, `{"op":"acquire","tenant":"bob","prompt_tokens":1}`}
	for _, as := range []*server{&anon, &wrong} {
		if r, _ := as.batch(t, calls...); r.Code != http.StatusUnauthorized || r.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("token %q: %d %+v, want 401", as.token, r.Code, r)
		}
	}
	_, got := eve.batch(t, calls...)
	if fmt.Sprint(statuses(got)) != "[200 403]" || !strings.Contains(got[1].reply(t).Error, `"bob"`) {
		t.Fatalf("eve's token: %v %s, want [200 403] naming bob", statuses(got), got[1].Body)
	}
	if st := gw.status(t, "bob"); st.Limits.Requests.Remaining != 10 {
		t.Fatalf("bob has %d requests left, want 10: no call for bob ran", st.Limits.Requests.Remaining)
	}
	if st := gw.status(t, "eve"); st.Limits.Requests.Remaining != 9 {
		t.Fatalf("eve has %d requests left, want 9", st.Limits.Requests.Remaining)
	}
}

// FuzzBatchBody: any body posted to /v1/batch is answered 200 with one
// result per call, each a status between 200 and 599, or refused whole with
// a 400 or 413; nothing panics.
func FuzzBatchBody(f *testing.F) {
	for _, seed := range []string{
		`{"calls":[{"op":"acquire","tenant":"acme","prompt_tokens":1}]}`,
		`{"calls":[{"op":"complete","tenant":"acme","lease":"AgA"},{"op":"renew","tenant":"acme","lease":"x"}]}`,
		`{"calls":[{"op":7},null,[],"acquire",{"op":"acquire","tenant":"a","wait_ms":-1}]}`,
		`{"calls":{}}`, `{"calls":[]}`, `[]`, ``,
	} {
		f.Add([]byte(seed))
	}
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 1000, Tokens: 1_000_000} }
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { n.Close() })
	rt := newAPI(f, n, router.Config{Limits: limits}, Config{})
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _ := http.NewRequest(http.MethodPost, "/v1/batch", bytes.NewReader(body))
		rec := httptest.NewRecorder()
		rt.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			return
		case http.StatusOK:
		default:
			t.Fatalf("%q: answered %d %s", body, rec.Code, rec.Body)
		}
		var in struct{ Calls []json.RawMessage }
		var out struct{ Results []slot }
		// The first JSON value, as decodeBody reads it (which lets a
		// trailing "]" pass, on every endpoint).
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&in); err != nil {
			t.Fatalf("%q accepted but not JSON: %v", body, err)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || len(out.Results) != len(in.Calls) {
			t.Fatalf("%q: %d results for %d calls (%v)", body, len(out.Results), len(in.Calls), err)
		}
		for i, r := range out.Results {
			if r.Status < 200 || r.Status > 599 || len(r.Body) == 0 {
				t.Fatalf("%q: slot %d is %d %s", body, i, r.Status, r.Body)
			}
		}
	})
}

package main

// `tokenring load` against fake nodes: httptest servers that answer
// /v1/acquire and /v1/complete in tokenringd's JSON (api/api.go), and
// /admin/ring and /admin/owner for -route. The load generator's counts must
// be exactly what the fake answered.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeNode stands in for tokenringd. Its acquires are numbered from 1 in
// the order they arrive; answer decides what each gets.
type fakeNode struct {
	t       *testing.T
	srv     *httptest.Server
	answer  func(n int64) string // "allow", "allow-fallback", "refuse", "503", "drop" or "hang"
	ring    []string             // /admin/ring members, "name=host:port"
	ownerOf func(tenant string) string

	acquires atomic.Int64

	mu        sync.Mutex        // guards the fields below
	leases    map[string]string // admitted leases not completed yet, to their tenant
	settled   int               // leases completed
	badBodies []string          // requests tokenringd would have answered 400
	perTenant map[string]int    // acquires by tenant
}

func newFakeNode(t *testing.T, answer func(n int64) string) *fakeNode {
	t.Helper()
	f := &fakeNode{t: t, answer: answer, leases: map[string]string{}, perTenant: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/acquire", f.acquire)
	mux.HandleFunc("POST /v1/complete", f.complete)
	mux.HandleFunc("GET /admin/ring", func(w http.ResponseWriter, _ *http.Request) {
		var members []map[string]string
		for _, m := range f.ring {
			name, addr, _ := strings.Cut(m, "=")
			members = append(members, map[string]string{"name": name, "http": addr})
		}
		writeJSON(w, 200, map[string]any{"self": "fake", "partition_count": 271, "members": members})
	})
	mux.HandleFunc("GET /admin/owner", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"owner": f.ownerOf(r.URL.Query().Get("tenant")), "partition": 0})
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeNode) addr() string { return strings.TrimPrefix(f.srv.URL, "http://") }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeStrict decodes r's body into v as tokenringd does (unknown fields
// refused); false records the body as one tokenringd would refuse.
func (f *fakeNode) decodeStrict(r *http.Request, v any) bool {
	raw, err := io.ReadAll(r.Body)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		err = dec.Decode(v)
	}
	if err != nil {
		f.mu.Lock()
		f.badBodies = append(f.badBodies, fmt.Sprintf("%s %s: %v", r.URL.Path, raw, err))
		f.mu.Unlock()
		return false
	}
	return true
}

func (f *fakeNode) bad(w http.ResponseWriter, r *http.Request, msg string) {
	f.mu.Lock()
	f.badBodies = append(f.badBodies, r.URL.Path+": "+msg)
	f.mu.Unlock()
	writeJSON(w, 400, map[string]string{"error": msg})
}

// limits is a "limits" object; the load generator does not read it.
var limits = map[string]any{
	"requests":    map[string]int{"limit": 100, "remaining": 0, "reset_ms": 1000},
	"tokens":      map[string]int{"limit": 100000, "remaining": 0, "reset_ms": 1000},
	"concurrency": map[string]int{"limit": 10, "remaining": 10, "reset_ms": 0},
}

func (f *fakeNode) acquire(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Tenant       string `json:"tenant"`
		Model        string `json:"model"`
		PromptTokens *int64 `json:"prompt_tokens"`
		MaxTokens    *int64 `json:"max_tokens"`
	}
	if !f.decodeStrict(r, &in) {
		writeJSON(w, 400, map[string]string{"error": "invalid JSON body"})
		return
	}
	if in.Tenant == "" || in.PromptTokens == nil || *in.PromptTokens < 0 || in.MaxTokens == nil || *in.MaxTokens < 1 {
		f.bad(w, r, fmt.Sprintf("bad acquire %+v", in))
		return
	}
	n := f.acquires.Add(1)
	f.mu.Lock()
	f.perTenant[in.Tenant]++
	f.mu.Unlock()
	switch what := f.answer(n); what {
	case "allow", "allow-fallback":
		lease := "lease-" + strconv.FormatInt(n, 10)
		f.mu.Lock()
		f.leases[lease] = in.Tenant
		f.mu.Unlock()
		writeJSON(w, 200, map[string]any{"allowed": true, "lease": lease, "reserved_tokens": *in.PromptTokens + *in.MaxTokens,
			"limits": limits, "fallback": what == "allow-fallback", "owner": "fake"})
	case "refuse":
		w.Header().Set("Retry-After", "1")
		writeJSON(w, 429, map[string]any{"allowed": false, "reason": "requests", "retry_after_ms": 1000, "limits": limits})
	case "503":
		w.Header().Set("Retry-After", "1")
		writeJSON(w, 503, map[string]any{"error": "owner of t:x did not answer within 2s", "retry_after_ms": 1000})
	case "drop": // a transport error: the connection closes without an answer
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			f.t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
	case "hang": // an owner that never answers, until the client goes
		<-r.Context().Done()
	default:
		panic("fakeNode: unknown answer " + what)
	}
}

func (f *fakeNode) complete(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Tenant string `json:"tenant"`
		Lease  string `json:"lease"`
		Usage  *struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if !f.decodeStrict(r, &in) {
		writeJSON(w, 400, map[string]string{"error": "invalid JSON body"})
		return
	}
	if in.Usage == nil || in.Usage.PromptTokens < 0 || in.Usage.CompletionTokens < 0 {
		f.bad(w, r, fmt.Sprintf("bad complete %+v", in))
		return
	}
	f.mu.Lock()
	tenant, ok := f.leases[in.Lease]
	ok = ok && tenant == in.Tenant
	if ok {
		delete(f.leases, in.Lease)
		f.settled++
	}
	f.mu.Unlock()
	writeJSON(w, 200, map[string]any{"settled": ok, "limits": limits})
}

// stats returns what the fake saw: acquires, settled completions, leases
// admitted and never completed, and the bodies tokenringd would refuse.
func (f *fakeNode) stats() (acquires int64, settled, open int, bad []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.acquires.Load(), f.settled, len(f.leases), append([]string(nil), f.badBodies...)
}

// firstAllowed answers the first n acquires allowed and refuses the rest.
func firstAllowed(n int64) func(int64) string {
	return func(i int64) string {
		if i <= n {
			return "allow"
		}
		return "refuse"
	}
}

// runLoadCLI runs `tokenring load args... -json` as main does and decodes
// its result. A run that has not ended by itself within a minute fails the
// test (and is left running: nothing can stop it from outside).
func runLoadCLI(t *testing.T, args ...string) (loadResult, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), append(append([]string{"load"}, args...), "-json"), &stdout, &stderr)
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("tokenring load %s did not stop by itself within a minute", strings.Join(args, " "))
	}
	if err != nil {
		return loadResult{}, err
	}
	var res loadResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("output %q: %v", stdout.String(), err)
	}
	return res, nil
}

// A fake that admits the first 120 acquires and refuses the rest: -n 500
// reports exactly 120 allowed, 380 refused, no error, and completes each
// admitted lease once. -n bounds the run: it ends long before -d. Both
// with net/http and with the workers' own HTTP/1.1 (-client raw).
func TestLoadCountsExactly(t *testing.T) {
	for _, mode := range []string{"http", "raw"} {
		t.Run(mode, func(t *testing.T) { loadCountsExactly(t, mode) })
	}
}

func loadCountsExactly(t *testing.T, mode string) {
	f := newFakeNode(t, func(n int64) string {
		switch {
		case n > 120:
			return "refuse"
		case n%10 == 0:
			return "allow-fallback"
		}
		return "allow"
	})
	start := time.Now()
	res, err := runLoadCLI(t, "-client", mode, "-targets", f.srv.URL, "-n", "500", "-c", "16", "-tenants", "50", "-d", "1m")
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("took %v: -n 500 did not end the run", took)
	}
	want := loadResult{Requests: 500, Allowed: 120, Refused: 380, Fallback: 12, Errors: 0, Completions: 120,
		Codes: map[string]int{"200": 120, "429": 380}, Route: "rr", Workers: 16}
	if got := countsOf(res); !equalCounts(got, want) {
		t.Fatalf("reported %+v\nwant       %+v", got, want)
	}
	if res.PerSecond <= 0 || res.P50us <= 0 || res.P50us > res.P90us || res.P90us > res.P99us || res.P99us > res.MaxUs {
		t.Errorf("rate and latencies: %+v", res)
	}
	acquires, settled, open, bad := f.stats()
	if acquires != 500 || settled != 120 || open != 0 || len(bad) > 0 {
		t.Fatalf("the fake saw %d acquires, %d settled, %d leases left open; refused bodies %q", acquires, settled, open, bad)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for tn := range f.perTenant {
		if i, err := strconv.Atoi(strings.TrimPrefix(tn, "load-")); err != nil || i < 0 || i >= 50 {
			t.Errorf("tenant %q is not one of load-0 … load-49", tn)
		}
	}
}

// countsOf keeps the fields of a result that do not depend on timing.
func countsOf(r loadResult) loadResult {
	return loadResult{Requests: r.Requests, Allowed: r.Allowed, Refused: r.Refused, Fallback: r.Fallback, Errors: r.Errors,
		Completions: r.Completions, Codes: r.Codes, Route: r.Route, Workers: r.Workers}
}

func equalCounts(a, b loadResult) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// Errors: a connection closed without an answer and an answer that is
// neither a decision nor a refusal (a 503) both count, exactly; neither is
// a decision.
func TestLoadCountsErrors(t *testing.T) {
	for _, mode := range []string{"http", "raw"} {
		t.Run(mode, func(t *testing.T) { loadCountsErrors(t, mode) })
	}
}

func loadCountsErrors(t *testing.T, mode string) {
	f := newFakeNode(t, func(n int64) string {
		switch n % 5 {
		case 0:
			return "503"
		case 1:
			return "drop"
		}
		return "allow"
	})
	res, err := runLoadCLI(t, "-client", mode, "-targets", f.srv.URL, "-n", "100", "-c", "4", "-d", "1m")
	if err != nil {
		t.Fatal(err)
	}
	want := loadResult{Requests: 80, Allowed: 60, Refused: 0, Errors: 40, Completions: 60,
		Codes: map[string]int{"200": 60, "503": 20}, Route: "rr", Workers: 4}
	if got := countsOf(res); !equalCounts(got, want) {
		t.Fatalf("reported %+v\nwant       %+v", got, want)
	}
	if acquires, settled, open, bad := f.stats(); acquires != 100 || settled != 60 || open != 0 || len(bad) > 0 {
		t.Fatalf("the fake saw %d acquires, %d settled, %d open; refused bodies %q", acquires, settled, open, bad)
	}
	if max := 60 / res.Seconds * 1.001; res.PerSecond > max {
		t.Errorf("%v decisions/s over %vs: counts more than the 60 decisions", res.PerSecond, res.Seconds)
	}
}

// -d bounds the run: with -n out of reach it stops at -d, and counts only
// what was answered before.
func TestLoadStopsAtDuration(t *testing.T) {
	f := newFakeNode(t, func(int64) string { return "allow" })
	start := time.Now()
	res, err := runLoadCLI(t, "-targets", f.srv.URL, "-n", "1000000000", "-c", "4", "-d", "300ms")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took < 300*time.Millisecond || took > 10*time.Second || res.Seconds < 0.3 {
		t.Fatalf("ran %v (reported %.3fs) with -d 300ms", took, res.Seconds)
	}
	acquires, settled, _, bad := f.stats()
	if res.Requests == 0 || res.Allowed != res.Requests || res.Errors != 0 || res.Refused != 0 || len(bad) > 0 {
		t.Fatalf("reported %+v; refused bodies %q", countsOf(res), bad)
	}
	// Requests cut by the deadline (at most one per worker) count as
	// nothing, so the fake may have seen a few more.
	if int(acquires) < res.Requests || int(acquires) > res.Requests+4 || settled < res.Completions {
		t.Fatalf("the fake saw %d acquires and %d completions, the report %d and %d", acquires, settled, res.Requests, res.Completions)
	}
}

// A node that never answers: the run still ends at -d, with an error
// saying nothing was answered.
func TestLoadStopsWhenNothingAnswers(t *testing.T) {
	f := newFakeNode(t, func(int64) string { return "hang" })
	start := time.Now()
	_, err := runLoadCLI(t, "-targets", f.srv.URL, "-n", "10", "-c", "2", "-d", "200ms")
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("ran %v with -d 200ms", took)
	}
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "no request was answered") {
		t.Fatalf("err = %v, want: no request was answered", err)
	}
}

// The text output states the same counts.
func TestLoadTextOutput(t *testing.T) {
	f := newFakeNode(t, firstAllowed(3))
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"load", "-targets", f.srv.URL + "/", "-n", "5", "-c", "1", "-complete=false"}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if want := "route=rr workers=1 requests=5 allowed=3 refused=2 fallback=0 errors=0 codes=map[200:3 429:2]\n"; !strings.HasPrefix(stdout.String(), want) {
		t.Fatalf("output %q, want it to start %q", stdout.String(), want)
	}
	if _, settled, open, _ := f.stats(); settled != 0 || open != 3 {
		t.Fatalf("-complete=false: %d leases completed, %d open; want 0 and 3", settled, open)
	}
}

// Bad flags are usage errors, found before any request is sent.
func TestLoadFlagValidation(t *testing.T) {
	f := newFakeNode(t, func(int64) string { return "allow" })
	ok := []string{"-targets", f.srv.URL, "-n", "10", "-d", "5s"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"unknown flag", []string{"-bogus"}},
		{"not a number", []string{"-c", "many"}},
		{"zero workers", []string{"-c", "0"}},
		{"negative workers", []string{"-c", "-3"}},
		{"too many workers", []string{"-c", "100000000"}},
		{"zero requests", []string{"-n", "0"}},
		{"zero tenants", []string{"-tenants", "0"}},
		{"zero duration", []string{"-d", "0s"}},
		{"negative duration", []string{"-d", "-1s"}},
		{"bad duration", []string{"-d", "soon"}},
		{"unknown route", []string{"-route", "nearest"}},
		{"unknown client", []string{"-client", "grpc"}},
		{"too many routed tenants", []string{"-route", "owner", "-tenants", "2000000000"}},
		{"no targets", []string{"-targets", ""}},
		{"blank targets", []string{"-targets", " , "}},
		{"target without scheme", []string{"-targets", f.addr()}},
		{"target of another scheme", []string{"-targets", "ftp://" + f.addr()}},
		{"one bad target of two", []string{"-targets", f.srv.URL + ",http://"}},
		{"zero max tokens", []string{"-max-tokens", "0"}},
		{"negative prompt tokens", []string{"-prompt-tokens", "-1"}},
		{"negative seed", []string{"-seed", "-1"}},
		{"stray argument", []string{"now"}},
		{"negative prefill", []string{"-prefill", "-1"}},
		{"prefill too large", []string{"-prefill", "10000", "-tenants", "1001"}},
		{"prefill of redis", []string{"-prefill", "10", "-system", "redis-incr", "-redis", "127.0.0.1:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append(append([]string{"load"}, ok...), tc.args...)
			err := run(context.Background(), args, &stdout, &stderr)
			if !errors.Is(err, errUsage) {
				t.Fatalf("tokenring %s: err = %v, want a usage error", strings.Join(args, " "), err)
			}
			if stdout.Len() > 0 {
				t.Errorf("printed %q", stdout.String())
			}
		})
	}
	if acquires, _, _, _ := f.stats(); acquires != 0 {
		t.Fatalf("bad flags sent %d acquires", acquires)
	}
	// The same flags, well formed, do run (-tenants 2000000000 included: a
	// tenant name is only drawn per request under -route rr).
	res, err := runLoadCLI(t, append(ok, "-c", "2", "-tenants", "2000000000")...)
	if err != nil || res.Allowed != 10 {
		t.Fatalf("good flags: %+v %v", countsOf(res), err)
	}
}

// -route owner sends each tenant to its owner, -route other to a node that
// is not its owner, rr alternates over -targets; each as the ring says.
func TestLoadRoutes(t *testing.T) {
	a := newFakeNode(t, func(int64) string { return "allow" })
	b := newFakeNode(t, func(int64) string { return "allow" })
	ownerOf := func(tenant string) string { // even tenants are a's
		i, _ := strconv.Atoi(strings.TrimPrefix(tenant, "load-"))
		return []string{"a", "b"}[i%2]
	}
	a.ring, a.ownerOf = []string{"a=" + a.addr(), "b=" + b.addr()}, ownerOf
	targets := a.srv.URL + "," + b.srv.URL
	parity := func(f *fakeNode) (even, odd int) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for tn, n := range f.perTenant {
			if i, _ := strconv.Atoi(strings.TrimPrefix(tn, "load-")); i%2 == 0 {
				even += n
			} else {
				odd += n
			}
		}
		clear(f.perTenant)
		return even, odd
	}
	for _, tc := range []struct {
		route                    string
		aEven, aOdd, bEven, bOdd bool // which tenants a and b may see
		exactSplit               bool // rr: 50 each
	}{
		{route: "owner", aEven: true, bOdd: true},
		{route: "other", aOdd: true, bEven: true},
		{route: "rr", aEven: true, aOdd: true, bEven: true, bOdd: true, exactSplit: true},
	} {
		res, err := runLoadCLI(t, "-targets", targets, "-route", tc.route, "-n", "100", "-c", "1", "-tenants", "20", "-d", "1m")
		if err != nil || res.Allowed != 100 || res.Completions != 100 {
			t.Fatalf("-route %s: %+v %v", tc.route, countsOf(res), err)
		}
		aEven, aOdd := parity(a)
		bEven, bOdd := parity(b)
		if (!tc.aEven && aEven > 0) || (!tc.aOdd && aOdd > 0) || (!tc.bEven && bEven > 0) || (!tc.bOdd && bOdd > 0) {
			t.Errorf("-route %s: a got %d even and %d odd tenants' acquires, b %d and %d", tc.route, aEven, aOdd, bEven, bOdd)
		}
		if tc.exactSplit && (aEven+aOdd != 50 || bEven+bOdd != 50) {
			t.Errorf("-route rr with one worker: a got %d, b %d; want 50 each", aEven+aOdd, bEven+bOdd)
		}
	}
	a.ring = a.ring[:1]
	if _, err := runLoadCLI(t, "-targets", targets, "-route", "other", "-n", "10", "-d", "1m"); err == nil || !strings.Contains(err.Error(), "at least two members") {
		t.Fatalf("-route other on a one-member ring: %v", err)
	}
}

// TestStartCPUProfile: -cpuprofile writes a profile pprof can read, and a
// path that cannot be created is an error before any load is sent.
func TestStartCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gen.prof")
	stop, err := startCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b { // pprof writes gzipped protobuf
		t.Fatalf("profile %d bytes (%v), want a gzipped pprof profile", len(b), err)
	}
	if _, err := startCPUProfile(filepath.Join(t.TempDir(), "missing", "gen.prof")); err == nil {
		t.Fatal("a profile path in a missing directory: no error")
	}
	stop, err = startCPUProfile("")
	if err != nil || stop() != nil {
		t.Fatalf("no -cpuprofile: %v", err)
	}
}

// A worker names tenant i as -prefix and i, whether the name was made
// ahead (the first maxNamedTenants) or is made at the call.
func TestWorkerTenantNames(t *testing.T) {
	c := loadConfig{prefix: "p-", tenants: 3}
	w := &worker{c: c, names: tenantNames(c)[:2]} // tenant 2 past the names made ahead
	for i, want := range []string{"p-0", "p-1", "p-2"} {
		if got := w.tenant(i); got != want {
			t.Errorf("tenant(%d) = %q, want %q", i, got, want)
		}
	}
	if n := len(tenantNames(loadConfig{prefix: "x", tenants: maxNamedTenants + 5})); n != maxNamedTenants {
		t.Errorf("%d names made ahead, want at most %d", n, maxNamedTenants)
	}
}

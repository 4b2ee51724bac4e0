package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/router"
)

// TestOwnerTableFullIs503: a new tenant at an owner holding MaxKeys keys
// gets a 503 with the reason and a Retry-After, on the decision API and on
// the proxy path's decision, nothing admitted and no fallback; tenants the
// owner holds are still served.
func TestOwnerTableFullIs503(t *testing.T) {
	l := limiter.Limits{Requests: 5}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: func(string) limiter.Limits { return l }, MaxKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	r := newAPI(t, n, router.Config{Limits: func(string) limiter.Limits { return l }}, Config{})
	hs := httptest.NewServer(r)
	t.Cleanup(hs.Close)
	s := &server{Server: hs, node: n}
	for _, tenant := range []string{"a", "b"} {
		if rep := s.acquire(t, `{"tenant":"`+tenant+`","prompt_tokens":1,"max_tokens":1}`); rep.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", tenant, rep.Code, rep.Error)
		}
	}
	rep := s.acquire(t, `{"tenant":"c","prompt_tokens":1,"max_tokens":1}`)
	if rep.Code != http.StatusServiceUnavailable || rep.Error != "too many keys held (max_keys reached at n1)" ||
		rep.Header.Get("Retry-After") != "1" || rep.RetryAfterMS != 1000 || rep.Allowed || rep.Fallback {
		t.Fatalf("new tenant at a full owner: %d %+v", rep.Code, rep)
	}
	if st := s.status(t, "c"); st.Code != http.StatusServiceUnavailable {
		t.Fatalf("status of a new tenant at a full owner: %d", st.Code)
	}
	if rep := s.acquire(t, `{"tenant":"a","prompt_tokens":1,"max_tokens":1}`); rep.Code != http.StatusOK {
		t.Fatalf("a held tenant: %d %s", rep.Code, rep.Error)
	}
	if n.Keys() != 2 {
		t.Fatalf("%d keys", n.Keys())
	}
}

// TestFallbackKeysBounded: with every owner down, the fallback remembers
// at most MaxFallbackKeys keys holding slots; past that a new tenant's
// degraded acquire is a 503 (max_keys), never an untracked admission
// (fallback.TestKeysBounded counts the entries).
func TestFallbackKeysBounded(t *testing.T) {
	const fallbackKeys = 256 // 4 a shard
	rg, err := ring.New(ring.Config{}, []ring.Member{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}})
	if err != nil {
		t.Fatal(err)
	}
	l := limiter.Limits{Requests: 30, Concurrency: 30}
	r := newAPI(t, downCluster{rg}, router.Config{Limits: func(string) limiter.Limits { return l }, MaxFallbackKeys: fallbackKeys}, Config{})
	hs := httptest.NewServer(r)
	t.Cleanup(hs.Close)
	s := &server{Server: hs}
	allowed, full := 0, 0
	for i := range 1000 {
		rep := s.acquire(t, fmt.Sprintf(`{"tenant":"t%d","prompt_tokens":1,"max_tokens":1}`, i))
		switch {
		case rep.Code == http.StatusOK && rep.Fallback:
			allowed++
		case rep.Code == http.StatusServiceUnavailable && strings.HasPrefix(rep.Error, "too many keys held (max_keys") && rep.Header.Get("Retry-After") == "1":
			full++
		default:
			t.Fatalf("tenant %d: %d %+v", i, rep.Code, rep)
		}
	}
	if allowed > fallbackKeys || allowed+full != 1000 || full < 1000-fallbackKeys {
		t.Fatalf("%d admitted, %d refused as full (cap %d)", allowed, full, fallbackKeys)
	}
}

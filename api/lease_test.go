package api

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/router"
)

var (
	secretA = bytes.Repeat([]byte("a"), 32)
	secretB = bytes.Repeat([]byte("b"), 32)
)

func TestLeaseRoundTrip(t *testing.T) {
	s := newLeaseSigner([][]byte{secretA})
	for _, l := range []router.Lease{
		v2Lease("acme", 1, false, "", 0, false, ""),
		v2Lease("a", 1<<60, false, "gpt-4o-mini", 7, true, "n2"),
	} {
		got, err := s.open(s.sign(l))
		if err != nil || got != l {
			t.Fatalf("round trip %+v: %+v %v", l, got, err)
		}
	}
}

// TestLeaseSignatureBindsEveryByte flips each bit of a signed lease in turn:
// no altered lease opens, under the key or any other.
func TestLeaseSignatureBindsEveryByte(t *testing.T) {
	s := newLeaseSigner([][]byte{secretA})
	l := v2Lease("eve", 0x1234, false, "gpt", 0x5678, false, "n1")
	raw, err := base64.RawURLEncoding.DecodeString(s.sign(l))
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		for bit := range 8 {
			alt := bytes.Clone(raw)
			alt[i] ^= 1 << bit
			if got, err := s.open(base64.RawURLEncoding.EncodeToString(alt)); err == nil {
				t.Fatalf("byte %d bit %d flipped: opened as %+v", i, bit, got)
			}
		}
	}
}

// TestLeaseKeysRotate: a signer holding {new, old} opens leases of either;
// one holding only new refuses old's; no secret refuses a keyed lease.
func TestLeaseKeysRotate(t *testing.T) {
	l := v2Lease("acme", 99, false, "", 0, false, "")
	old, both, onlyNew, none := newLeaseSigner([][]byte{secretA}), newLeaseSigner([][]byte{secretB, secretA}), newLeaseSigner([][]byte{secretB}), newLeaseSigner(nil)
	if _, err := both.open(old.sign(l)); err != nil {
		t.Fatalf("rotation: {new, old} refuses old's lease: %v", err)
	}
	if _, err := old.open(both.sign(l)); err == nil {
		t.Fatal("a lease signed with the new secret opened under the old one alone")
	}
	if _, err := onlyNew.open(old.sign(l)); err != errLeaseSignature {
		t.Fatalf("after rotation the old secret's lease: %v, want errLeaseSignature", err)
	}
	if _, err := none.open(old.sign(l)); err != errLeaseSignature {
		t.Fatalf("no secret opened a keyed lease: %v", err)
	}
	if _, err := old.open(none.sign(l)); err != errLeaseSignature {
		t.Fatalf("a keyed signer opened an unkeyed lease: %v", err)
	}
}

func FuzzOpenLease(f *testing.F) {
	s := newLeaseSigner([][]byte{secretA})
	f.Add(s.sign(v2Lease("acme", 3, false, "p", 9, false, "n")))
	f.Add(s.sign(v2Lease("t", 1<<63, true, "", 0, false, "")))
	f.Add(s.sign(chainLease()))
	f.Add(newLeaseSigner(nil).sign(v2Lease("acme", 1, false, "", 0, false, "")))
	f.Add("")
	f.Add("AgA")
	f.Fuzz(func(t *testing.T, text string) {
		// Whatever opens carries a tenant and signs back to a lease that
		// opens to the same fields: no text opens unless its tag is ours.
		if l, err := s.open(text); err == nil {
			if l.Tenant == "" {
				t.Fatalf("opened a lease without tenant: %q", text)
			}
			if again, err := s.open(s.sign(l)); err != nil || again != l {
				t.Fatalf("re-sign of %q: %+v %v", text, again, err)
			}
		}
		// Fields built from the input survive sign and open, and a
		// lease is never opened by another cluster's secret.
		if text == "" || len(text) > 200 {
			return
		}
		k := uint64(len(text))
		want := v2Lease(text, k<<40, false, text[len(text)/2:], k*k+1, k%2 == 0, text[:len(text)/3])
		got, err := s.open(s.sign(want))
		if err != nil || got != want {
			t.Fatalf("round trip of %+v: %+v, %v", want, got, err)
		}
		if _, err := newLeaseSigner([][]byte{secretB}).open(s.sign(want)); err != errLeaseSignature {
			t.Fatalf("a foreign secret opened %+v: %v", want, err)
		}
	})
}

// forge returns the lease text an attacker without the key makes: the
// fields encoded as the node does, tagged under a key of the attacker's.
func forge(l router.Lease) string {
	return newLeaseSigner([][]byte{[]byte("attacker's guess of the secret!!")}).sign(l)
}

// TestForgedLeasesChangeNothing replays the attacks on the decision API:
// with no API key at all, a hand-made lease for bob's running request
// (even with bob's real lease ids), an altered one, one of another cluster,
// and eve's own lease presented for bob or pointed at bob's pool lease. Each
// is refused with a 4xx, and bob's slot and reservation stay as they were.
func TestForgedLeasesChangeNothing(t *testing.T) {
	pools := map[string]limiter.Limits{"gpt": {Concurrency: 3}}
	t0 := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return t0 } // so that the status compared after is the same to the millisecond
	s := start(t, setup{tenants: map[string]limiter.Limits{"": {Tokens: 100_000, Concurrency: 5}}, pools: pools, secrets: [][]byte{secretA}, now: clock})
	bob := s.acquire(t, `{"tenant":"bob","model":"gpt","prompt_tokens":1000,"max_tokens":1000}`)
	eve := s.acquire(t, `{"tenant":"eve","model":"gpt","prompt_tokens":1,"max_tokens":1}`)
	if !bob.Allowed || !eve.Allowed {
		t.Fatalf("setup: bob %+v eve %+v", bob, eve)
	}
	bl, err := s.api.leases.open(bob.Lease)
	if err != nil {
		t.Fatal(err)
	}
	el, _ := s.api.leases.open(eve.Lease)
	before := s.status(t, "bob").Limits
	evePointedAtBob := el
	evePointedAtBob.Sides()[1].ID = bl.Sides()[1].ID
	raw, _ := base64.RawURLEncoding.DecodeString(bob.Lease)
	raw[3] ^= 1 // inside the payload
	foreign := start(t, setup{pools: pools, secrets: [][]byte{secretB}}).acquire(t, `{"tenant":"bob","model":"gpt","prompt_tokens":1}`)
	cases := []struct {
		name, tenant, lease string
		code                int
	}{
		{"hand-made lease with bob's ids", "bob", forge(bl), http.StatusForbidden},
		{"hand-made unsigned v1 lease", "bob", base64.RawURLEncoding.EncodeToString(append([]byte{1, 0, 1, 1, 3}, "bob\x00\x00"...)), http.StatusBadRequest},
		{"bob's lease altered", "bob", base64.RawURLEncoding.EncodeToString(raw), http.StatusForbidden},
		{"another cluster's lease", "bob", foreign.Lease, http.StatusForbidden},
		{"eve's lease for bob", "bob", eve.Lease, http.StatusBadRequest},
		{"eve's lease pointed at bob's pool lease", "eve", forge(evePointedAtBob), http.StatusForbidden},
	}
	for _, c := range cases {
		for _, path := range []string{"/v1/complete", "/v1/renew"} {
			body := fmt.Sprintf(`{"tenant":%q,"lease":%q}`, c.tenant, c.lease)
			if path == "/v1/complete" {
				body = fmt.Sprintf(`{"tenant":%q,"lease":%q,"usage":{"prompt_tokens":0,"completion_tokens":0}}`, c.tenant, c.lease)
			}
			if r := s.do(t, http.MethodPost, path, body); r.Code != c.code || r.Error == "" || r.Settled {
				t.Errorf("%s at %s: %d %+v, want %d with an error", c.name, path, r.Code, r, c.code)
			}
		}
	}
	if after := s.status(t, "bob").Limits; after != before {
		t.Fatalf("forged leases changed bob's state:\nbefore %+v\nafter  %+v", before, after)
	}
	// The pool's 3 slots: bob's and eve's are still held, so exactly one
	// more request runs, however many forged releases came before.
	admitted := 0
	for i := range 4 {
		if s.acquire(t, fmt.Sprintf(`{"tenant":"t%d","model":"gpt","prompt_tokens":1}`, i)).Allowed {
			admitted++
		}
	}
	if admitted != 1 {
		t.Fatalf("pool concurrency 3 with 2 held: %d more admitted, want exactly 1", admitted)
	}
	if r := s.complete(t, "bob", bob.Lease, `{"prompt_tokens":1000,"completion_tokens":10}`); !r.Settled {
		t.Fatalf("bob's real lease no longer settles: %+v", r)
	}
}

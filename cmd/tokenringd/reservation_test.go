package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// reservationConfig: acme reserves estimates (the default), beta what
// reservation says, and both sit below team, which reserves max_tokens.
func reservationConfig(beta string) string {
	return `
admin_token: adm
limits:
  tenants:
    acme: {tpm: 1000, concurrency: 4, parent: team}
    beta: {rpm: 0, tpm: 100000, reservation: ` + beta + `, parent: team}
  groups:
    team: {tpm: 1000000, reservation: max_tokens}
`
}

// The reservation of the file, end to end: each level's owner applies its
// own (a group in max_tokens below a tenant that estimates reserves the
// whole bound all the same), a reload changes it at the next request, and
// an estimating tenant whose requests use their whole max_tokens shows its
// overdraft in /v1/tenants, /admin/limits and tokenring_overdrawn_tokens_total.
func TestReservationFromTheFile(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "tokenring.yaml")
	if err := os.WriteFile(cfgPath, []byte(reservationConfig("estimate")), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _, _ := startDaemon(t, "-name", "a", "-config", cfgPath, "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-gossip-profile", "local")
	waitReadyAt(t, base)
	type dim struct{ Limit, Remaining, Overdraft int64 }
	type answer struct {
		Allowed        bool
		Lease          string
		ReservedTokens int64 `json:"reserved_tokens"`
		Settled        bool
		Limits         struct{ Tokens dim }
	}
	call := func(method, path, body string) (answer, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer adm")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var a answer
		_ = json.Unmarshal(raw, &a)
		return a, string(raw)
	}
	acquire := func(tenant string) answer {
		t.Helper()
		a, raw := call("POST", "/v1/acquire", fmt.Sprintf(`{"tenant":%q,"prompt_tokens":20,"max_tokens":400}`, tenant))
		if !a.Allowed {
			t.Fatalf("acquire for %s: %s", tenant, raw)
		}
		return a
	}
	complete := func(tenant, lease string, completion int) answer {
		t.Helper()
		a, raw := call("POST", "/v1/complete", fmt.Sprintf(`{"tenant":%q,"lease":%q,"usage":{"prompt_tokens":20,"completion_tokens":%d}}`, tenant, lease, completion))
		if !a.Settled {
			t.Fatalf("complete for %s: %s", tenant, raw)
		}
		return a
	}
	for _, tenant := range []string{"acme", "beta"} { // history: completions of 10, an estimate of 20 + 15
		for range 5 {
			complete(tenant, acquire(tenant).Lease, 10)
		}
	}
	// acme estimates; team, above it, reserves the whole bound.
	var leases []string
	for range 4 {
		a := acquire("acme")
		if a.ReservedTokens != 35 {
			t.Fatalf("acme reserved %d, want its estimate 35", a.ReservedTokens)
		}
		leases = append(leases, a.Lease)
	}
	type level struct {
		Level                        string
		Limits, Remaining, Overdraft struct{ TPM int64 }
	}
	var lv struct{ Levels []level }
	_, raw := call("GET", "/admin/limits?tenant=acme", "")
	if err := json.Unmarshal([]byte(raw), &lv); err != nil || len(lv.Levels) != 2 {
		t.Fatalf("/admin/limits: %s", raw)
	}
	// acme and team each hold 10 × 30 settled (history of both tenants
	// at team, 5 at acme), plus 4 reservations: 35 at acme, 420 at team.
	if got, want := lv.Levels[0].Remaining.TPM, int64(1000-5*30-4*35); got != want {
		t.Errorf("acme: %d tokens left, want %d", got, want)
	}
	if got, want := lv.Levels[1].Remaining.TPM, int64(1_000_000-10*30-4*420); got != want {
		t.Errorf("team (max_tokens below an estimating tenant): %d tokens left, want %d", got, want)
	}
	// Each uses its whole max_tokens: acme counts 150 + 4 × 420 = 1830 of 1000.
	for _, l := range leases {
		complete("acme", l, 400)
	}
	const over = 5*30 + 4*420 - 1000
	if st, raw := call("GET", "/v1/tenants/acme", ""); st.Limits.Tokens != (dim{1000, 0, over}) {
		t.Errorf("/v1/tenants/acme: %s, want tokens overdrawn by %d", raw, over)
	}
	_, raw = call("GET", "/admin/limits?tenant=acme", "")
	if err := json.Unmarshal([]byte(raw), &lv); err != nil || lv.Levels[0].Overdraft.TPM != over || lv.Levels[1].Overdraft.TPM != 0 {
		t.Errorf("/admin/limits: %s, want acme's tpm overdrawn by %d and team's not", raw, over)
	}
	if _, metrics := call("GET", "/metrics", ""); !strings.Contains(metrics, fmt.Sprintf("\ntokenring_overdrawn_tokens_total %d\n", over)) {
		t.Errorf("/metrics: no tokenring_overdrawn_tokens_total %d", over)
	}
	// A reload turns beta to max_tokens at its next request.
	if a := acquire("beta"); a.ReservedTokens != 35 {
		t.Fatalf("beta reserved %d before the reload, want 35", a.ReservedTokens)
	} else {
		complete("beta", a.Lease, 10)
	}
	if err := os.WriteFile(cfgPath, []byte(reservationConfig("max_tokens")), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := acquire("beta")
		complete("beta", a.Lease, 10)
		if a.ReservedTokens == 420 {
			break
		}
		if a.ReservedTokens != 35 || time.Now().After(deadline) {
			t.Fatalf("beta reserved %d after the file changed, want 420 within 10 s", a.ReservedTokens)
		}
		time.Sleep(20 * time.Millisecond) // the file is looked at every 250 ms
	}
}

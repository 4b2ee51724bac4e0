package test

// Limits a gateway sends with its acquires, across real processes: each
// key's owner applies them whichever node the acquire reached, a client
// without may_set_limits is refused, and two gateways sending different
// limits converge on the newest. api/sentlimits_test.go and
// node/sentlimits_test.go hold the rest.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sendAs posts body to p's path as token, returning the status and the
// decoded answer.
func sendAs(t *testing.T, p *Proc, token, path, body string) (int, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s via %s: %v", path, p.Name, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// limitAt is tenant's request limit and remaining as p reports them.
func limitAt(t *testing.T, p *Proc, token, tenant string) (limit, remaining int64) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.URL()+"/v1/tenants/"+tenant, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st tenantStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Limits.Requests.Limit, st.Limits.Requests.Remaining
}

func TestSentLimitsAcrossNodes(t *testing.T) {
	needFull(t)
	c := NewCluster(t, daemon, 3, `
limits:
  default: {rpm: 1000, tpm: 1000000000, concurrency: 1000}
  window: 600s
clients:
  tok-gw-a: {tenants: ["*"], may_set_limits: true}
  tok-gw-b: {tenants: ["*"], may_set_limits: true}
  tok-app: {tenants: ["*"]}
`)
	tenant := "sent-1"
	owner := ownerMap(t, c.Live(), []string{tenant})[tenant]
	var others []*Proc
	for _, p := range c.Live() {
		if p.Name != owner {
			others = append(others, p)
		}
	}
	acquire := func(p *Proc, token string, rpm int) (int, bool) {
		code, out := sendAs(t, p, token, "/v1/acquire", fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1,"limits":{"rpm":%d}}`, tenant, rpm))
		return code, out["allowed"] == true
	}
	if code, _ := acquire(others[0], "tok-app", 30); code != http.StatusForbidden {
		t.Fatalf("sent limits from a client without may_set_limits: %d, want 403", code)
	}
	admitted := 0
	for range 25 { // gateway A, rpm 30, through a node that forwards
		if _, ok := acquire(others[0], "tok-gw-a", 30); ok {
			admitted++
		}
	}
	if admitted != 25 {
		t.Fatalf("gateway A under its rpm 30: %d of 25 admitted", admitted)
	}
	if limit, left := limitAt(t, others[1], "tok-app", tenant); limit != 30 || left != 5 {
		t.Fatalf("after gateway A, %s reports rpm %d with %d left, want 30 with 5 (the owner %s applied it)", others[1].Name, limit, left, owner)
	}
	// Gateway B sends rpm 20 through the other forwarder: the newest
	// wins, and with 25 counted nothing more is admitted.
	if code, ok := acquire(others[1], "tok-gw-b", 20); code != http.StatusTooManyRequests || ok {
		t.Fatalf("gateway B's rpm 20 with 25 counted: %d admitted %v, want 429", code, ok)
	}
	for _, p := range c.Live() {
		if limit, left := limitAt(t, p, "tok-app", tenant); limit != 20 || left != 0 {
			t.Errorf("%s reports rpm %d with %d left, want gateway B's 20 with 0", p.Name, limit, left)
		}
	}
	// An application's acquire without limits is decided under the newest
	// sent ones, not the file's 1000.
	if code, out := sendAs(t, others[0], "tok-app", "/v1/acquire", fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1}`, tenant)); code != http.StatusTooManyRequests {
		t.Fatalf("an acquire without limits after gateway B's: %d %v, want 429", code, out)
	}
}

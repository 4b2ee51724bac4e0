package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// adminLimitsConfig is a tenant k in team (in org), with a models entry at
// k and at team, a pool, and team at teamRPM.
func adminLimitsConfig(teamRPM string) string {
	return `
admin_token: adm-secret
limits:
  default: {rpm: 60, tpm: 100000, concurrency: 10}
  tenants:
    k: {rpm: 100, parent: team, models: {gpt-4o-mini: {tpm: 50000}}}
  groups:
    team: {rpm: ` + teamRPM + `, parent: org, models: {"gpt-4o-*": {rpm: 7}}}
    org: {tpm: 10000000}
pools:
  gpt-4o-mini: {tpm: 30000000}
`
}

type adminLimitsAnswer struct {
	Levels []struct {
		Level, Key, Owner, Source string
		Limits, Remaining         struct{ RPM, TPM, Concurrency int64 }
	}
}

// GET /admin/limits shows the chain an acquire charges, in the order it is
// reserved, with the limits each owner applies, what is left and the config
// entry each comes from; a reload shows at once.
func TestAdminLimitsShowsTheEffectiveChain(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "tokenring.yaml")
	if err := os.WriteFile(cfgPath, []byte(adminLimitsConfig("1000")), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _, _ := startDaemon(t, "-name", "a", "-config", cfgPath, "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-gossip-profile", "local")
	waitReadyAt(t, base)
	resp, err := http.Post(base+"/v1/acquire", "application/json", strings.NewReader(`{"tenant":"k","model":"gpt-4o-mini","prompt_tokens":10,"max_tokens":10}`))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("acquire: %v %v", resp, err)
	}
	resp.Body.Close()
	get := func(query, token string) (int, adminLimitsAnswer) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/admin/limits"+query, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a adminLimitsAnswer
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return resp.StatusCode, a
	}
	if code, _ := get("?tenant=k", ""); code != http.StatusUnauthorized {
		t.Errorf("without the admin token: %d, want 401", code)
	}
	if code, _ := get("?model=gpt-4o-mini", "adm-secret"); code != http.StatusBadRequest {
		t.Errorf("without a tenant: %d, want 400", code)
	}
	code, a := get("?tenant=k&model=gpt-4o-mini", "adm-secret")
	if code != http.StatusOK {
		t.Fatalf("/admin/limits: %d", code)
	}
	type row struct {
		level, source string
		rpm, tpm      int64
		usedRPM       int64
	}
	want := []row{
		{"tenant:k", "limits.tenants.k", 100, 100000, 1},
		{"tenant:k|model:gpt-4o-mini", "limits.tenants.k.models.gpt-4o-mini", 0, 50000, 1},
		{"group:team", "limits.groups.team", 1000, 0, 1},
		{"group:team|model:gpt-4o-*", "limits.groups.team.models.gpt-4o-*", 7, 0, 1},
		{"group:org", "limits.groups.org", 0, 10000000, 1},
		{"pool:gpt-4o-mini", "pools.gpt-4o-mini", 0, 30000000, 1},
	}
	check := func(a adminLimitsAnswer, want []row) {
		t.Helper()
		if len(a.Levels) != len(want) {
			t.Fatalf("%d levels, want %d: %+v", len(a.Levels), len(want), a.Levels)
		}
		for i, w := range want {
			l := a.Levels[i]
			if l.Level != w.level || l.Source != w.source || l.Limits.RPM != w.rpm || l.Limits.TPM != w.tpm || l.Owner != "a" {
				t.Errorf("level %d: %+v, want %+v", i, l, w)
			}
			if w.rpm > 0 && l.Remaining.RPM != w.rpm-w.usedRPM {
				t.Errorf("level %s: %d requests left of %d, want %d", w.level, l.Remaining.RPM, w.rpm, w.rpm-w.usedRPM)
			}
		}
	}
	check(a, want)
	// team lowered to 500 in the file: the owner applies it at once.
	if err := os.WriteFile(cfgPath, []byte(adminLimitsConfig(" 500")), 0o600); err != nil {
		t.Fatal(err)
	}
	want[2].rpm = 500
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, a = get("?tenant=k&model=gpt-4o-mini", "adm-secret"); len(a.Levels) > 2 && a.Levels[2].Limits.RPM == 500 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("team still at %+v 10 s after the file changed", a.Levels)
		}
		time.Sleep(20 * time.Millisecond) // the file is looked at every 250 ms
	}
	check(a, want)
	// Limits a request sent show as such.
	resp, err = http.Post(base+"/v1/acquire", "application/json", strings.NewReader(`{"tenant":"k","model":"gpt-4o-mini","prompt_tokens":1,"limits":{"rpm":55}}`))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("acquire with sent limits: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, a = get("?tenant=k&model=gpt-4o-mini", "adm-secret"); a.Levels[0].Source != "request" || a.Levels[0].Limits.RPM != 55 || a.Levels[2].Source != "limits.groups.team" {
		t.Errorf("after limits sent for k: %+v, want k's level from the request at rpm 55, the team's from the file", a.Levels)
	}
}

// waitReadyAt waits until the node at base answers /readyz 200.
func waitReadyAt(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within 10 s: %v", base, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

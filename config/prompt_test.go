package config

import (
	"strings"
	"testing"
)

// TestMaxPromptBytes: limits.max_prompt_bytes is read, defaults to 256 KiB
// and is refused outside 1..1 MiB with the field named.
func TestMaxPromptBytes(t *testing.T) {
	c, err := Parse([]byte("limits: {max_prompt_bytes: 64_000}\n"), nil)
	if err != nil || c.Limits.MaxPromptBytes != 64_000 {
		t.Fatalf("64_000: %d, %v", c.Limits.MaxPromptBytes, err)
	}
	for _, v := range []string{"0", "-1", "1048577"} {
		_, err := Parse([]byte("limits: {max_prompt_bytes: "+v+"}\n"), nil)
		if err == nil || !strings.Contains(err.Error(), "limits.max_prompt_bytes: must be between 1 and 1048576, got "+v) {
			t.Fatalf("%s: %v", v, err)
		}
	}
}

// TestKeyAccounts: a keys: entry is a tenant, or a mapping with the
// tenant and the OpenAI organisation and project the proxy sets for it.
func TestKeyAccounts(t *testing.T) {
	c, err := Parse([]byte(`keys:
  sk-a: acme
  sk-b: {tenant: beta, openai_organization: org-1, openai_project: proj_1}
  sk-c: {tenant: gamma}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Keys["sk-a"] != "acme" || c.Keys["sk-b"] != "beta" || c.Keys["sk-c"] != "gamma" || len(c.Keys) != 3 {
		t.Fatalf("keys: %v", c.Keys)
	}
	if want := (KeyAccount{OpenAIOrganization: "org-1", OpenAIProject: "proj_1"}); c.KeyAccounts["sk-b"] != want || len(c.KeyAccounts) != 1 {
		t.Fatalf("accounts: %v", c.KeyAccounts)
	}
	for text, want := range map[string]string{
		"keys: {sk-b: {tenant: beta, org: x}}":                       "keys.sk-b.org: unknown field",
		"keys: {sk-b: {openai_project: p}}":                          "keys.sk-b: tenant must not be empty",
		"keys: {sk-b: {tenant: b, openai_project: \"p\\r\\nX: 1\"}}": "keys.sk-b.openai_project: must not contain control characters",
	} {
		if _, err := Parse([]byte(text), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", text, err, want)
		}
	}
}

// TestHTTPTLS: http.tls is read, and its files must come as a pair.
func TestHTTPTLS(t *testing.T) {
	c, err := Parse([]byte("http: {tls: {cert_file: /c.pem, key_file: /k.pem, client_ca_file: /ca.pem}}\n"), nil)
	if err != nil || c.HTTP.TLS != (TLS{CertFile: "/c.pem", KeyFile: "/k.pem", ClientCAFile: "/ca.pem"}) || !c.HTTP.TLS.Enabled() {
		t.Fatalf("%+v, %v", c.HTTP.TLS, err)
	}
	for text, want := range map[string]string{
		"http: {tls: {cert_file: /c.pem}}":         "http.tls: cert_file and key_file go together",
		"http: {tls: {client_ca_file: /ca.pem}}":   "http.tls.client_ca_file: needs cert_file and key_file",
		"http: {tls: {cert_file: /c, keyfile: x}}": "http.tls.keyfile: unknown field",
	} {
		if _, err := Parse([]byte(text), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", text, err, want)
		}
	}
}

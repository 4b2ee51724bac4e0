package proxy

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProviderErrorShapes: each error kind in each provider's shape, as the
// proxy has always answered them.
func TestProviderErrorShapes(t *testing.T) {
	for _, tc := range []struct {
		kind              errKind
		openAI, anthropic string
	}{
		{errInvalid, `"type":"invalid_request_error","param":null,"code":null`, `"type":"invalid_request_error"`},
		{errAuth, `"type":"invalid_request_error","param":null,"code":"invalid_api_key"`, `"type":"authentication_error"`},
		{errTooLarge, `"type":"invalid_request_error","param":null,"code":null`, `"type":"request_too_large"`},
		{errOverloaded, `"type":"server_error","param":null,"code":null`, `"type":"overloaded_error"`},
		{errServer, `"type":"server_error","param":null,"code":null`, `"type":"api_error"`},
		{errRateRequests, `"type":"requests","param":null,"code":"rate_limit_exceeded"`, `"type":"rate_limit_error"`},
		{errRateTokens, `"type":"tokens","param":null,"code":"rate_limit_exceeded"`, `"type":"rate_limit_error"`},
	} {
		e := apiError{418, tc.kind, "m"}
		for _, want := range []struct {
			p    provider
			body string
		}{
			{openAI{}, `{"error":{"message":"m",` + tc.openAI + `}}`},
			{anthropic{}, `{"type":"error","error":{` + tc.anthropic + `,"message":"m"}}`},
		} {
			w := httptest.NewRecorder()
			want.p.fail(w, e)
			if got := strings.TrimSpace(w.Body.String()); w.Code != 418 || got != want.body {
				t.Errorf("%s kind %d: %d %s, want 418 %s", want.p.name(), tc.kind, w.Code, got, want.body)
			}
		}
	}
}

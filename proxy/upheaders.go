package proxy

// The request headers the LLM proxy sends upstream: an allow-list, so that
// a tenant cannot steer the operator's upstream account (its organisation
// or project, with the operator's key), pass cookies, or forge where the
// request came from. docs/proxy.md, "Headers sent upstream", has the table.

import (
	"net"
	"net/http"
)

// UserAgent is the User-Agent of every request the proxy sends
// upstream; the client's is not forwarded.
const UserAgent = "tokenring-proxy/1"

// Account is what the proxy sets upstream for one client API key
// (Config.Account): the OpenAI organisation and project billed for
// its requests. Empty fields send nothing: the upstream key's default.
type Account struct {
	OpenAIOrganization string
	OpenAIProject      string
}

// forwardedHeaders are the client's headers the proxy forwards as they
// came (canonical names): what the providers' APIs read to shape an
// answer (Accept), their versions and betas, and idempotency keys.
// Accept-Encoding is not among them: the relay reads the answer for its
// usage, so it asks for one it can read (net/http's transparent gzip, or
// identity for streams and the http1 client).
var forwardedHeaders = [...]string{
	"Accept",
	"Anthropic-Version", "Anthropic-Beta", // Anthropic
	"Openai-Beta",     // OpenAI (OpenAI-Beta)
	"Idempotency-Key", // either
}

// credentialHeaders carry the client's own API key: forwarded only when
// the upstream has no key of its own (Upstream.APIKey empty).
var credentialHeaders = [...]string{"Authorization", "X-Api-Key"}

// upstreamHeader is the header of the request sent upstream for the
// client's request req: the forwarded headers, the client's credentials
// or the upstream's key, Content-Type, the proxy's User-Agent, the peer's
// address as X-Forwarded-For (the client's own value never), the key's
// OpenAI organisation and project for OpenAI, and Accept-Encoding:
// identity for a stream (a gzip reader may hold back events). Nothing
// else: Cookie, OpenAI-Organization, OpenAI-Project, Forwarded, the
// tokenring headers and every other header stay here.
func upstreamHeader(req *http.Request, c *proxyCall, key string) http.Header {
	h := make(http.Header, len(forwardedHeaders)+6)
	for _, k := range forwardedHeaders {
		if vv := req.Header[k]; len(vv) > 0 {
			h[k] = vv
		}
	}
	if key == "" {
		for _, k := range credentialHeaders {
			if vv := req.Header[k]; len(vv) > 0 {
				h[k] = vv
			}
		}
	} else {
		c.p.authorize(h, key)
	}
	h["Content-Type"] = jsonContentType
	h["User-Agent"] = []string{UserAgent}
	if ip := peerIP(req.RemoteAddr); ip != "" {
		h["X-Forwarded-For"] = []string{ip}
	}
	if a, ok := c.p.(accountSetter); ok {
		a.setAccount(h, c.account)
	}
	if c.stream {
		h["Accept-Encoding"] = []string{"identity"}
	}
	return h
}

// accountSetter is a provider whose upstream bills an account the proxy
// names for the client's key (OpenAI's organisation and project).
type accountSetter interface {
	setAccount(h http.Header, a Account)
}

// setAccount sets a's OpenAI organisation and project, those it has.
func (openAI) setAccount(h http.Header, a Account) {
	if o := a.OpenAIOrganization; o != "" {
		h["Openai-Organization"] = []string{o}
	}
	if p := a.OpenAIProject; p != "" {
		h["Openai-Project"] = []string{p}
	}
}

// peerIP is the IP of a RemoteAddr ("host:port"); "" when it has none.
func peerIP(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil || net.ParseIP(host) == nil {
		return ""
	}
	return host
}

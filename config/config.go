// Package config is tokenringd's YAML configuration: the limits of tenants
// and upstream pools, the fallback policy, the proxy's API keys and upstream.
// The file format is docs/configuration.md's "The YAML file" (every field optional);
// the YAML names are the field tags of Config below.
//
// A Config is a plain value: Default returns the built-in one, Parse and Load
// read a file on top of it and validate the result. ${VAR} references are
// expanded with a getenv function the caller passes in; this package never
// reads the environment itself. It imports nothing else of tokenring.
package config

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Limits are the limits of one key (a tenant or a pool) over the window.
// Zero in a dimension means that dimension is unlimited, as in limiter.Limits.
type Limits struct {
	RPM         int64 `yaml:"rpm"`         // requests per window
	TPM         int64 `yaml:"tpm"`         // prompt+completion tokens per window
	Concurrency int64 `yaml:"concurrency"` // requests in flight
	// Reservation is what an acquire reserves at this key: "" (absent) is
	// ReserveEstimate.
	Reservation Reservation `yaml:"reservation,omitempty"`
	// Budget is the level's spend limit (prices.go); nil: none.
	Budget *Budget `yaml:"budget,omitempty"`
}

// Reservation is how many tokens a key reserves for a request when it is
// admitted, until its real usage settles it (limiter.ReserveMode).
//
// ReserveEstimate admits more: a key whose completions run short reserves
// little for each. But a request that uses more than its reservation is
// settled past the limit (an overdraft), by at most concurrency ×
// (max_tokens − estimate) in a window. ReserveMaxTokens never overdraws as
// long as the upstream honours max_tokens, but holds tokens a request will
// not use until it ends, so the key refuses sooner, and a request whose
// prompt plus max_tokens exceeds tpm never fits.
type Reservation string

// The reservations.
const (
	ReserveEstimate  Reservation = "estimate"   // the prompt plus the smaller of max_tokens and 1.5× the key's average completion
	ReserveMaxTokens Reservation = "max_tokens" // the prompt plus max_tokens (default_max_tokens when a request gives none)
)

// LimitsSection is the "limits:" section.
type LimitsSection struct {
	// Default applies to every tenant not in Tenants. A field absent from the
	// file keeps its built-in default.
	Default Limits `yaml:"default"`
	// Tenants are per-tenant limits. A field absent from a tenant's entry is
	// taken from Default (so "acme: {rpm: 600}" changes only acme's RPM); write
	// 0 to make it unlimited.
	Tenants map[string]Limits `yaml:"tenants,omitempty"`
	// TenantChains are the parent group and per-model limits of the
	// Tenants entries that have them ("parent:", "models:"); see chains.go.
	TenantChains map[string]TenantChain `yaml:"-"`
	// Groups are the levels above tenants (teams, organisations): see Group.
	Groups map[string]Group `yaml:"groups,omitempty"`
	// Window is the sliding window that RPM and TPM are counted over.
	Window time.Duration `yaml:"window"`
	// LeaseTTL is how long a concurrency slot lives without a renew.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// MaxPromptBytes is the largest prompt (or messages) in bytes that a
	// node counts with tiktoken, 0.3-0.5 s of CPU a MiB: the decision API
	// answers a larger one 413 (send prompt_tokens instead), the LLM proxy
	// reserves an estimate of a token per three bytes. Default 256 KiB;
	// between 1 and 1 MiB (the largest body). Not part of LimitsHash: it
	// decides what is counted, not what is admitted.
	MaxPromptBytes int `yaml:"max_prompt_bytes"`
}

// Fallback is what a node does when a key's owner is unreachable: the
// connection is refused or reset, or the peer stays silent for PeerLiveness
// after a probe. A live owner that is merely slow never gets a fallback.
type Fallback string

// The fallback policies.
const (
	FallbackDegraded Fallback = "degraded" // a strict local limiter with this node's share (limit ÷ live members)
	FallbackOpen     Fallback = "open"     // admit
	FallbackClosed   Fallback = "closed"   // refuse
)

// Upstream is an LLM provider the proxy forwards to.
type Upstream struct {
	// BaseURL is an http or https URL without a trailing slash, e.g.
	// "https://api.openai.com/v1"; the proxy appends "/chat/completions" or
	// "/messages". A trailing slash in the file is removed.
	BaseURL string `yaml:"base_url"`
	// APIKey, when not empty, replaces the client's credentials on forwarded
	// requests.
	APIKey string `yaml:"api_key,omitempty"`
	// DialTimeout bounds the TCP connect to the upstream (default 5s).
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// TLSTimeout bounds the TLS handshake with the upstream (default 10s).
	TLSTimeout time.Duration `yaml:"tls_timeout"`
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers once the request is sent (default 300s: a long completion
	// without streaming answers only at its end).
	ResponseHeaderTimeout time.Duration `yaml:"response_header_timeout"`
	// StreamIdleTimeout is how long a streamed answer may stay silent
	// between two reads before the proxy gives up on it (default 60s).
	StreamIdleTimeout time.Duration `yaml:"stream_idle_timeout"`
}

// KeyAccount is the upstream account of one LLM proxy API key: the
// OpenAI-Organization and OpenAI-Project headers the proxy sets on its
// requests to OpenAI (the client's own are never forwarded).
type KeyAccount struct {
	OpenAIOrganization string `yaml:"openai_organization,omitempty"`
	OpenAIProject      string `yaml:"openai_project,omitempty"`
}

// HTTP bounds the HTTP server (the "http:" section).
type HTTP struct {
	// MaxConns is the number of open client connections beyond which a new
	// one is answered 503 and closed at once. 0 (the default) is automatic:
	// tokenringd uses ¾ of the process's open-file limit, at most 16384.
	MaxConns int `yaml:"max_conns"`
	// EventLoops is the number of event loops that answer, each on one
	// thread, the decision calls this node decides at once (see
	// docs/operations.md, "Event loops (Linux)"). 0 (the default) is
	// automatic: tokenringd uses one for every two CPUs it may run on, at
	// least one. -1: none, every connection served by a goroutine of its
	// own.
	EventLoops int `yaml:"event_loops"`
	// FastPath serves the decision API's plain HTTP/1.1 requests from the
	// connection's bytes (internal/http1), handing every other request to
	// net/http (default true). false: net/http alone serves every
	// connection, as over TLS, and event_loops is ignored.
	FastPath bool `yaml:"fast_path"`
	// ReadHeaderTimeout bounds reading a request's headers (default 5s).
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included (default 30s).
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// IdleTimeout is how long a keep-alive connection may wait for its next
	// request (default 120s).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// WriteTimeout bounds writing a non-streaming answer (default 60s); the
	// LLM proxy's routes, which may stream, are exempt.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// TLS, when its CertFile is set, serves -http over TLS only.
	TLS TLS `yaml:"tls"`
}

// Peer bounds the peer protocol (the "peer:" section).
type Peer struct {
	// MaxFrameBytes is the largest frame a peer may send (default 1 MiB).
	MaxFrameBytes int `yaml:"max_frame_bytes"`
	// MaxConns is the number of peer connections accepted at once
	// (default 256).
	MaxConns int `yaml:"max_conns"`
}

// Replication configures how owners copy changed keys to their backups
// (docs/operations.md, "Replication and the Redis checkpoint").
type Replication struct {
	// Interval is how often an owner copies the keys it changed to their
	// backup (and to the checkpoint): what a crash can lose in async mode
	// is what the owner admitted since its last finished round.
	Interval time.Duration `yaml:"interval"`
	// Mode is async (rounds every Interval) or sync (an admission is
	// answered only once its key's backups hold it; rounds still run).
	Mode ReplicationMode `yaml:"mode"`
	// Copies is how many members besides its owner hold a copy of each
	// key: its state survives that many simultaneous crashes. Each copy
	// adds one more copy per round, and in sync mode an answer waits for
	// the slowest reachable backup. 1 by default (DefaultCopies); at most
	// MaxCopies.
	Copies int `yaml:"copies"`
}

// Bounds of replication.copies.
const (
	DefaultCopies = 1
	MaxCopies     = 7 // ring.MaxBackups
)

// ReplicationMode is async or sync.
type ReplicationMode string

// The replication modes.
const (
	ReplicationAsync ReplicationMode = "async"
	ReplicationSync  ReplicationMode = "sync"
)

// Queue configures the wait queues.
type Queue struct {
	// MaxWaiters is the number of waiters per key beyond which a request is
	// refused with reason queue_full. At least 1.
	MaxWaiters int `yaml:"max_waiters"`
	// Aging: a batch waiter ranks as an interactive one enqueued Aging later,
	// so batch work is never starved. Greater than 0.
	Aging time.Duration `yaml:"aging"`
}

// Config is tokenringd's configuration. The YAML names are in the field tags;
// marshalling a Config with yaml.v3 gives a file that Parse reads back to the
// same Config (unless a string holds "${", which Parse would expand).
//
// A Config holds maps: treat one as read-only once loaded and it can be shared
// by any number of goroutines.
type Config struct {
	// Limits are the tenants' limits and the window they are counted over.
	Limits LimitsSection `yaml:"limits"`
	// Pools are shared upstream limits by model name. A name ending in '*'
	// matches every model starting with the rest ("gpt-4o-*"); see Pool.
	// A field absent from a pool's entry is unlimited.
	Pools map[string]Limits `yaml:"pools,omitempty"`
	// Prices is what each model's tokens cost (prices.go): model, or a
	// prefix ending in '*', to its price. A budget charges them.
	Prices map[string]Price `yaml:"prices,omitempty"`
	// FairShare says whether a pool's tenants share it by weighted fair
	// shares once it is contended (limiter.Limits.Fair): true by default;
	// false is first come, first served.
	FairShare bool `yaml:"fair_share"`
	// Weights are tenants' weights in their pools' fair shares, 1 to
	// MaxWeight; a tenant not listed weighs 1.
	Weights map[string]int64 `yaml:"weights,omitempty"`
	// Fallback is the policy when a key's owner is unreachable.
	Fallback Fallback `yaml:"fallback"`
	// ForwardTimeout is how long a forwarded decision waits for its answer
	// before the node probes the owner: if nothing was received from the
	// owner lately it sends one ping, and the owner counts as unreachable
	// (fallback) only if it then stays silent for PeerLiveness. It is no
	// longer a deadline: a slow owner is waited for up to ForwardMaxWait.
	ForwardTimeout time.Duration `yaml:"forward_timeout"`
	// ForwardMaxWait is the hard cap on waiting for a live but slow owner
	// (plus an acquire's wait_ms). At the cap the request is refused with a
	// 503 that admits nothing: slowness never admits on top of the owner.
	// It must exceed ForwardTimeout + PeerLiveness, the time a hung owner
	// takes to count as unreachable.
	ForwardMaxWait time.Duration `yaml:"forward_max_wait"`
	// PeerLiveness is how long a probed peer connection may stay silent
	// before the peer counts as unreachable and its calls fall back.
	PeerLiveness time.Duration `yaml:"peer_liveness"`
	// Replication copies each owner's changed keys to their backups.
	Replication Replication `yaml:"replication"`
	// Drain is how long a node that got SIGTERM keeps serving with /readyz
	// failing, so load balancers notice, before it hands its partitions
	// on and leaves. Zero leaves at once.
	Drain time.Duration `yaml:"drain"`
	// Keys maps the LLM proxy's API keys to tenants. In the file a key's
	// value is its tenant, or a mapping {tenant, openai_organization,
	// openai_project} whose last two go to KeyAccounts.
	Keys map[string]string `yaml:"keys,omitempty"`
	// KeyAccounts are the upstream accounts the proxy sets for some API
	// keys (the keys: entries written as mappings); a key without one
	// sends neither header upstream. Not marshalled: a file written from
	// a Config holds only the keys' tenants.
	KeyAccounts map[string]KeyAccount `yaml:"-"`
	// Upstream is the OpenAI-compatible provider the proxy forwards to.
	Upstream Upstream `yaml:"upstream"`
	// AdminToken, when not empty, is the bearer token /admin/* requires.
	AdminToken string `yaml:"admin_token,omitempty"`

	// DefaultMaxTokens is the completion estimate reserved for a request that
	// has no max_tokens. At least 1.
	DefaultMaxTokens int64 `yaml:"default_max_tokens"`
	// Queue configures the wait queues.
	Queue Queue `yaml:"queue"`
	// AnthropicUpstream, when its BaseURL is set, is where the proxy forwards
	// Anthropic's POST /v1/messages; otherwise those go to Upstream. See
	// Config.Anthropic.
	AnthropicUpstream Upstream `yaml:"anthropic_upstream,omitempty"`

	// ClusterSecret, when not empty, is the secret every member of the
	// cluster shares: gossip is encrypted and authenticated with a key
	// derived from it. At least MinSecretLen bytes. Empty by default;
	// tokenringd also reads it from TOKENRING_CLUSTER_SECRET.
	ClusterSecret string `yaml:"cluster_secret,omitempty"`
	// ClusterSecretSecondary, when not empty, is a second secret accepted
	// from others but never used to send or sign: set the new secret as
	// cluster_secret and the old one here on every node, then remove it.
	// Only valid with ClusterSecret; at least MinSecretLen bytes.
	ClusterSecretSecondary string `yaml:"cluster_secret_secondary,omitempty"`
	// Clients are the decision API's clients (see Client), keyed by their
	// token, or, for an entry with a Cert, by its name. Empty by default.
	Clients map[string]Client `yaml:"clients,omitempty"`
	// MaxKeys is the number of limiter keys a node holds at most
	// (default 1000000, at least 1).
	MaxKeys int `yaml:"max_keys"`
	// HotKeyRate is how many acquires a second a node must forward for one
	// key before it asks the key's owner for a slice of its budget and
	// decides that key's requests itself (docs/operations.md, "Hot keys"). Default 5;
	// 0 turns slices off.
	HotKeyRate int `yaml:"hot_key_rate"`
	// PreloadEncodings loads the tiktoken tables (cl100k_base and
	// o200k_base) when the node starts. Off by default: each is loaded when
	// a prompt is first counted in it (0.05-0.2 s, once), so that a node
	// whose callers send prompt_tokens never holds them (8 MB of heap,
	// about 30 MiB of RSS until the loading's garbage is returned to the
	// system). Turn it on to pay that at startup instead of on the first
	// request that counts a prompt.
	PreloadEncodings bool `yaml:"preload_encodings"`
	// HTTP bounds the HTTP server.
	HTTP HTTP `yaml:"http"`
	// Peer bounds the peer protocol.
	Peer Peer `yaml:"peer"`
	// GRPC is the gRPC server of Envoy's rate limit service (rls.go).
	GRPC GRPC `yaml:"grpc"`
	// RLS configures Envoy's rate limit service: its rate limit files.
	RLS RLS `yaml:"rls"`
	// Log is how tokenringd writes its log (log.go).
	Log Log `yaml:"log"`
	// Tracing exports OpenTelemetry traces (tracing.go).
	Tracing Tracing `yaml:"tracing"`
}

// MinSecretLen is the shortest cluster_secret and cluster_secret_secondary,
// in bytes.
const MinSecretLen = 32

// Built-in defaults, used by Default.
const (
	DefaultRPM              = 60
	DefaultTPM              = 100_000
	DefaultConcurrency      = 10
	DefaultWindow           = 60 * time.Second
	DefaultLeaseTTL         = 120 * time.Second
	DefaultFallback         = FallbackDegraded
	DefaultForwardTimeout   = 15 * time.Millisecond
	DefaultForwardMaxWait   = 2 * time.Second
	DefaultPeerLiveness     = time.Second
	DefaultReplication      = 100 * time.Millisecond
	DefaultReplicationMode  = ReplicationAsync
	DefaultDrain            = 5 * time.Second
	DefaultUpstreamURL      = "http://127.0.0.1:9000/v1"
	DefaultDefaultMaxTokens = 4096
	DefaultMaxWaiters       = 1024
	DefaultAging            = 5 * time.Second
	DefaultMaxPromptBytes   = 256 << 10
	MaxPromptBytesLimit     = 1 << 20 // the largest request body

	DefaultMaxKeys               = 1_000_000
	DefaultHotKeyRate            = 5
	DefaultReadHeaderTimeout     = 5 * time.Second
	DefaultReadTimeout           = 30 * time.Second
	DefaultIdleTimeout           = 120 * time.Second
	DefaultWriteTimeout          = 60 * time.Second
	DefaultMaxFrameBytes         = 1 << 20
	DefaultPeerMaxConns          = 256
	DefaultDialTimeout           = 5 * time.Second
	DefaultTLSTimeout            = 10 * time.Second
	DefaultResponseHeaderTimeout = 300 * time.Second
	DefaultStreamIdleTimeout     = 60 * time.Second
)

// Bounds on values; anything beyond is rejected as a mistake.
const (
	MaxLimit    = 1_000_000_000_000_000 // 1e15, for every count
	MaxDuration = 24 * time.Hour        // for window, lease_ttl and queue.aging
	MinDuration = time.Millisecond      // for window and lease_ttl
	MaxForward  = time.Minute           // for forward_timeout, forward_max_wait and peer_liveness
)

// Default returns the built-in configuration: every tenant gets 60 requests,
// 100000 tokens and 10 concurrent requests per 60 s window, slots live 120 s,
// fallback is degraded once an owner is unreachable (probed after 15 ms,
// silent for 1 s), a slow owner is waited for up to 2 s, changed keys are
// replicated every 100 ms (async), a SIGTERM drains for 5 s, no pools, no API keys, the upstream is
// http://127.0.0.1:9000/v1, default_max_tokens 4096, queues hold 1024 waiters
// with 5 s aging, and there is no separate Anthropic upstream; no cluster
// secret and no client tokens, at most 1000000 keys, slices for keys a node
// forwards over 5 acquires a second for, the tiktoken tables loaded at
// first use, HTTP timeouts of 5 s
// (headers), 30 s (request), 120 s (idle) and 60 s (write), an automatic
// connection cap, peer frames up to 1 MiB and 256 peer connections, and
// upstream timeouts of 5 s (dial), 10 s (TLS), 300 s (response headers) and
// 60 s (stream idle), no gRPC server, and Envoy's rate limit service
// deciding a request's descriptors all or nothing.
func Default() Config {
	up := Upstream{
		DialTimeout:           DefaultDialTimeout,
		TLSTimeout:            DefaultTLSTimeout,
		ResponseHeaderTimeout: DefaultResponseHeaderTimeout,
		StreamIdleTimeout:     DefaultStreamIdleTimeout,
	}
	main := up
	main.BaseURL = DefaultUpstreamURL
	return Config{
		FairShare: true,
		Limits: LimitsSection{
			Default:  Limits{RPM: DefaultRPM, TPM: DefaultTPM, Concurrency: DefaultConcurrency},
			Window:   DefaultWindow,
			LeaseTTL: DefaultLeaseTTL,

			MaxPromptBytes: DefaultMaxPromptBytes,
		},
		Fallback:          DefaultFallback,
		ForwardTimeout:    DefaultForwardTimeout,
		ForwardMaxWait:    DefaultForwardMaxWait,
		PeerLiveness:      DefaultPeerLiveness,
		Replication:       Replication{Interval: DefaultReplication, Mode: DefaultReplicationMode, Copies: DefaultCopies},
		Drain:             DefaultDrain,
		Upstream:          main,
		AnthropicUpstream: up,
		DefaultMaxTokens:  DefaultDefaultMaxTokens,
		Queue:             Queue{MaxWaiters: DefaultMaxWaiters, Aging: DefaultAging},
		MaxKeys:           DefaultMaxKeys,
		HotKeyRate:        DefaultHotKeyRate,
		HTTP: HTTP{
			FastPath:          true,
			ReadHeaderTimeout: DefaultReadHeaderTimeout,
			ReadTimeout:       DefaultReadTimeout,
			IdleTimeout:       DefaultIdleTimeout,
			WriteTimeout:      DefaultWriteTimeout,
		},
		Peer: Peer{MaxFrameBytes: DefaultMaxFrameBytes, MaxConns: DefaultPeerMaxConns},
		RLS:  RLS{AllOrNothing: true},
		Log:  Log{Format: LogFmt},
	}
}

// TenantLimits returns the limits of tenant: its entry in limits.tenants, or
// limits.default.
func (c Config) TenantLimits(tenant string) Limits {
	if l, ok := c.Limits.Tenants[tenant]; ok {
		return l
	}
	return c.Limits.Default
}

// Pool returns the pool that model belongs to: the pool named exactly model,
// else the pool with the longest name ending in '*' whose prefix model starts
// with. name is the pool's name as written in the file (use it as the
// limiter key); ok is false when no pool matches, including for an empty
// model.
func (c Config) Pool(model string) (name string, l Limits, ok bool) {
	if model == "" {
		return "", Limits{}, false
	}
	if l, ok := c.Pools[model]; ok {
		return model, l, true
	}
	best := -1
	for n, pl := range c.Pools {
		prefix, wild := strings.CutSuffix(n, "*")
		if wild && len(prefix) > best && strings.HasPrefix(model, prefix) {
			best, name, l = len(prefix), n, pl
		}
	}
	return name, l, best >= 0
}

// Tenant returns the tenant of an LLM proxy API key, and false when the key is
// not in keys.
func (c Config) Tenant(apiKey string) (string, bool) {
	if apiKey == "" {
		return "", false
	}
	t, ok := c.Keys[apiKey]
	return t, ok
}

// Anthropic returns the upstream for Anthropic's /v1/messages:
// AnthropicUpstream when its BaseURL is set, else Upstream.
func (c Config) Anthropic() Upstream {
	if c.AnthropicUpstream.BaseURL != "" {
		return c.AnthropicUpstream
	}
	return c.Upstream
}

// Validate reports every value out of range, each naming its field path, e.g.
// "limits.tenants.acme.rpm: must be >= 0, got -5", joined by newlines; nil
// when c is valid. Parse and Load validate what they return, so Validate is
// for a Config built or changed in code.
func (c Config) Validate() error {
	var errs errorList
	limits := errs.limits
	limits("limits.default", c.Limits.Default)
	for _, t := range sortedKeys(c.Limits.Tenants) {
		if t == "" {
			errs.add("limits.tenants", "tenant name must not be empty")
		}
		limits("limits.tenants."+t, c.Limits.Tenants[t])
	}
	c.validateChains(&errs)
	errs.duration("limits.window", c.Limits.Window, MinDuration, MaxDuration)
	errs.duration("limits.lease_ttl", c.Limits.LeaseTTL, MinDuration, MaxDuration)
	if m := c.Limits.MaxPromptBytes; m < 1 || m > MaxPromptBytesLimit {
		errs.add("limits.max_prompt_bytes", fmt.Sprintf("must be between 1 and %d, got %d", MaxPromptBytesLimit, m))
	}
	for _, p := range sortedKeys(c.Pools) {
		switch {
		case p == "":
			errs.add("pools", "model name must not be empty")
		case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
			errs.add("pools."+p, "'*' is allowed only at the end")
		}
		limits("pools."+p, c.Pools[p])
	}
	switch c.Fallback {
	case FallbackDegraded, FallbackOpen, FallbackClosed:
	default:
		errs.add("fallback", fmt.Sprintf("must be one of degraded|open|closed, got %q", string(c.Fallback)))
	}
	errs.duration("forward_timeout", c.ForwardTimeout, 1, MaxForward)
	errs.duration("forward_max_wait", c.ForwardMaxWait, 1, MaxForward)
	errs.duration("peer_liveness", c.PeerLiveness, 1, MaxForward)
	inRange := func(d time.Duration) bool { return d > 0 && d <= MaxForward }
	if hung := c.ForwardTimeout + c.PeerLiveness; inRange(c.ForwardTimeout) && inRange(c.PeerLiveness) && inRange(c.ForwardMaxWait) && c.ForwardMaxWait <= hung {
		errs.add("forward_max_wait", fmt.Sprintf("must be > forward_timeout + peer_liveness (%v), got %v: a hung owner would be refused at the cap instead of failing over", hung, c.ForwardMaxWait))
	}
	errs.duration("replication.interval", c.Replication.Interval, MinDuration, MaxForward)
	switch c.Replication.Mode {
	case ReplicationAsync, ReplicationSync:
	default:
		errs.add("replication.mode", fmt.Sprintf("must be async or sync, got %q", string(c.Replication.Mode)))
	}
	if c.Replication.Copies < 1 || c.Replication.Copies > MaxCopies {
		errs.add("replication.copies", fmt.Sprintf("must be between 1 and %d, got %d", MaxCopies, c.Replication.Copies))
	}
	if c.Drain < 0 || c.Drain > MaxForward*10 {
		errs.add("drain", fmt.Sprintf("must be between 0 and %v, got %v", MaxForward*10, c.Drain))
	}
	for _, k := range sortedKeys(c.Keys) {
		if k == "" {
			errs.add("keys", "API key must not be empty")
		} else if c.Keys[k] == "" {
			errs.add("keys."+k, "tenant must not be empty")
		}
	}
	for _, k := range sortedKeys(c.KeyAccounts) {
		a := c.KeyAccounts[k]
		errs.headerValue("keys."+k+".openai_organization", a.OpenAIOrganization)
		errs.headerValue("keys."+k+".openai_project", a.OpenAIProject)
	}
	errs.url("upstream.base_url", c.Upstream.BaseURL)
	errs.count("default_max_tokens", c.DefaultMaxTokens, 1)
	errs.count("queue.max_waiters", int64(c.Queue.MaxWaiters), 1)
	errs.duration("queue.aging", c.Queue.Aging, 1, MaxDuration)
	if a := c.AnthropicUpstream; a.BaseURL != "" {
		errs.url("anthropic_upstream.base_url", a.BaseURL)
	} else if a.APIKey != "" {
		errs.add("anthropic_upstream.base_url", "must be set when anthropic_upstream.api_key is")
	}
	errs.upstreamTimeouts("upstream", c.Upstream)
	errs.upstreamTimeouts("anthropic_upstream", c.AnthropicUpstream)
	c.validateSecurity(&errs)
	c.validateRLS(&errs)
	c.validateLog(&errs)
	c.validateTracing(&errs)
	return errs.err()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

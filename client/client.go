// Package client is a Go client of tokenring's decision API (POST
// /v1/acquire, /v1/complete, /v1/renew, and /v1/batch), for gateways that
// ask a tokenring node before each LLM request.
//
// Concurrent calls are batched opportunistically, as the nodes batch their
// peer frames: there is no timer. A call made while no request is in
// flight goes out at once (alone, through its single endpoint). Calls made
// while requests are in flight queue, and go as one POST /v1/batch (up to
// Config.MaxBatch calls) when a request returns, or, if a sender is free
// (fewer than Config.MaxInFlight requests in flight), as soon as as many
// are queued as a request in flight carries on average. Under light load
// every call is one request with no added delay; under heavy load each
// request carries about as many calls as the one before it, so that the
// HTTP cost (and the node's) is shared by many calls: 32 goroutines calling
// at once make requests of about 12 calls, up to four in flight.
//
// The package imports nothing else of tokenring's.
package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the zero fields of Config.
const (
	DefaultMaxBatch     = 1000 // the server's cap on the calls of one /v1/batch
	DefaultMaxInFlight  = 4
	DefaultRetries      = 2
	DefaultRetryBackoff = 100 * time.Millisecond
)

// Config configures a Client. Every zero field takes its default.
type Config struct {
	// Token is the client token sent as "Authorization: Bearer <Token>";
	// empty sends none (a node with no "clients:" configured).
	Token string
	// HTTPClient sends the requests. Nil: against an http:// node each
	// sender keeps an HTTP/1.1 connection of its own, written and read
	// without net/http (raw.go), and Status uses a net/http client of the
	// Client's own (MaxInFlight idle connections per host, closed by
	// Close); against https://, that client sends everything.
	HTTPClient *http.Client
	// MaxBatch is the most calls sent in one request, at most
	// DefaultMaxBatch (1000, the server's cap). 1 turns batching off: one
	// HTTP request per call.
	MaxBatch int
	// MaxInFlight is the most requests (single calls or batches) in flight
	// at once. Default DefaultMaxInFlight (4): with 4 to 64 goroutines
	// calling, the node always has a request to decide while the answered
	// callers queue their next calls. Fewer in flight makes bigger batches
	// (less CPU a call, on both sides), which pays only when the two cores
	// are saturated (BENCHMARKS.md, "The Go client").
	MaxInFlight int
	// Retries is how many times a call is sent again after a 503 with a
	// retry-after (honouring it) or a transport error before its request
	// was written (after RetryBackoff, doubling). Default DefaultRetries
	// (2); negative: never.
	Retries int
	// RetryBackoff is the first wait before resending after a transport
	// error. Default DefaultRetryBackoff (100 ms).
	RetryBackoff time.Duration
	// RetryRefused makes Acquire wait out a refusal's retry-after and ask
	// again while its context allows, instead of returning the refusal.
	// A refusal is an answer, not a failure: off by default.
	RetryRefused bool
}

// Client calls one tokenring node's decision API. It is safe for concurrent
// use. Close stops it.
type Client struct {
	base      string // the node's base URL, without a trailing slash
	cfg       Config
	http      *http.Client
	ownsHTTP  bool
	queue     *queue
	closed    chan struct{} // closed by Close
	closeOnce sync.Once
	senders   sync.WaitGroup
	ctx       context.Context // the senders' requests; cancelled by Close
	cancel    context.CancelFunc
	requests  atomic.Int64 // HTTP requests sent (single calls and batches)
	sent      atomic.Int64 // calls those requests carried
	// authorization is the Authorization header's value; nil: none.
	authorization []string
	pendings      sync.Pool // of *pending, each with its done channel
	// rawHost is the node's host (host[:port]) when the senders post
	// through connections of their own (raw.go); empty: through http.
	rawHost string
	rawPath string // the base URL's path, without a trailing slash
}

// Stats counts what a Client has sent.
type Stats struct {
	Requests int64 // HTTP requests sent: single calls and batches, retries included
	Calls    int64 // calls those requests carried
}

// Stats returns what the Client has sent so far.
func (c *Client) Stats() Stats { return Stats{Requests: c.requests.Load(), Calls: c.sent.Load()} }

// count counts one request carrying calls calls.
func (c *Client) count(calls int) {
	c.requests.Add(1)
	c.sent.Add(int64(calls))
}

// ErrClosed is the error of a call made or still queued after Close.
var ErrClosed = errors.New("tokenring client closed")

// ErrLeaseNotFound is the error of Complete and Renew for a lease the node
// no longer holds: completed, expired, or unknown.
var ErrLeaseNotFound = errors.New("lease not found: completed, expired or unknown")

// APIError is an answer of the node that is neither a decision nor a
// success: a 400, 401, 403, 404, 413, 503, ...
type APIError struct {
	Status     int           // HTTP status (or the batch slot's)
	Message    string        // the answer's "error"
	RetryAfter time.Duration // the answer's retry-after, if any
}

func (e *APIError) Error() string {
	return fmt.Sprintf("tokenring: %d %s", e.Status, e.Message)
}

// New returns a Client of the node at baseURL (such as
// "http://127.0.0.1:8080") and starts its senders.
func New(baseURL string, cfg Config) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("tokenring client: %q is not an http(s) base URL", baseURL)
	}
	if cfg.MaxBatch <= 0 || cfg.MaxBatch > DefaultMaxBatch {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	switch {
	case cfg.Retries == 0:
		cfg.Retries = DefaultRetries
	case cfg.Retries < 0:
		cfg.Retries = 0
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	c := &Client{base: strings.TrimRight(baseURL, "/"), cfg: cfg, http: cfg.HTTPClient, queue: newQueue(), closed: make(chan struct{})}
	if c.http == nil && u.Scheme == "http" {
		c.rawHost, c.rawPath = u.Host, strings.TrimRight(u.EscapedPath(), "/")
	}
	if c.http == nil {
		c.http, c.ownsHTTP = &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: cfg.MaxInFlight,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   true,
		}}, true
	}
	if cfg.Token != "" {
		c.authorization = []string{"Bearer " + cfg.Token}
	}
	c.pendings.New = func() any { return &pending{done: make(chan result, 1)} }
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for range cfg.MaxInFlight {
		c.senders.Go(c.newSender().run)
	}
	return c, nil
}

// Close stops the senders: calls still queued, and those in flight, return
// ErrClosed (or the error of their aborted request); later calls return
// ErrClosed. It returns once every goroutine of the Client has ended.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.cancel()
		c.senders.Wait()
		for _, p := range c.queue.close() {
			c.deliver(p, result{err: ErrClosed})
		}
		if c.ownsHTTP {
			c.http.CloseIdleConnections()
		}
	})
	return nil
}

// Dim is one dimension of a key's limits.
type Dim struct {
	Limit     int64         // the configured limit; 0: unlimited
	Remaining int64         // what is left of it now
	Overdraft int64         // how far what is counted is past the limit (usage settled beyond its reservation); 0 within it
	Reset     time.Duration // until the window has room again (ms precision)
}

// Limits is a key's state after a call.
type Limits struct {
	Requests, Tokens, Concurrency Dim
}

// AcquireRequest is one admission to ask for. Give at most one of
// PromptTokens and Prompt (which the node counts).
type AcquireRequest struct {
	Tenant       string
	Model        string        // selects the model's pool, if the node maps it to one
	PromptTokens int64         // the prompt's tokens, counted by the caller
	Prompt       string        // the prompt's text, counted by the node; empty: PromptTokens is sent
	MaxTokens    int64         // the completion's cap; 0: the node's estimate
	Batch        bool          // priority "batch" rather than "interactive"
	Wait         time.Duration // wait up to this long for room (wait_ms) instead of a refusal
}

// Decision is the node's answer to an acquire.
type Decision struct {
	Allowed        bool
	Lease          string        // when Allowed: to Complete (and Renew) the request
	ReservedTokens int64         // tokens held for the request until Complete
	Reason         string        // when refused: the dimension that refused (requests, tokens, concurrency, ...)
	RetryAfter     time.Duration // when refused: when to ask again
	Limits         Limits        // the tenant's
	Pool           string        // the model's pool, if any
	Fallback       bool          // decided by a fallback limiter: the tenant's owner was unreachable
	Owner          string        // the member that decided
}

// Usage is what an admitted request consumed, reported to Complete.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// CachedTokens and CacheWriteTokens are the parts of PromptTokens read
	// from and written to the provider's prompt cache: a budget charges
	// them at their prices. Zero: none.
	CachedTokens     int64 `json:"cached_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
}

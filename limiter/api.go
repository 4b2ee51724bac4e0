// Package limiter is the arithmetic of tokenring: sliding windows for requests
// and tokens, two-phase token reservations, concurrency slots with a TTL, and
// priority wait queues, all for one key at a time, plus a sharded table of keys.
//
// Nothing here does I/O, starts a goroutine or reads the clock: every method
// takes the current time as a parameter, so a test drives it with a fake clock
// the way etcd's raft is driven without a network. Waiters are not blocked
// here; a Budget hands back Grants and the caller does any blocking.
package limiter

import "time"

// Limits are one key's limits. A zero (or negative) Requests, Tokens or
// Concurrency means that dimension is unlimited. Window and LeaseTTL are
// capped at 366 days, so that time arithmetic cannot overflow.
type Limits struct {
	Requests    int64         // requests admitted per Window
	Tokens      int64         // prompt+completion tokens per Window
	Concurrency int64         // requests in flight (slots)
	Window      time.Duration // sliding window length; zero means DefaultWindow
	LeaseTTL    time.Duration // slot lifetime without renew; zero means DefaultLeaseTTL
	Reserve     ReserveMode   // what an acquire reserves (Budget.Acquire); zero means ReserveEstimate

	// Spend is the picodollars (10⁻¹² USD) the key's requests may cost
	// per Period, reserved at acquire from Request.Price and settled
	// with the real usage's cost (Price.Cost); 0 means unlimited. At
	// most MaxSpend.
	Spend  int64
	Period Period // what Spend counts over; the zero Period never resets

	// Fair shares the key among the flows that ask it (Request.Flow,
	// a pool's tenants) by weighted max-min fair shares, and serves its
	// waiters by weighted fair queuing across them (fair.go).
	Fair bool
}

// ReserveMode is how many tokens a key reserves for a request at acquire:
// what its window counts until the request is settled with its real usage.
// Any value but ReserveMaxTokens counts as ReserveEstimate.
//
// The trade-off: a reservation below the real usage is admitted on a
// guess, and its settle charges the rest even where the window has no room
// left, taking the token window past its limit (an overdraft,
// DimStatus.Overdraft), by at most concurrency × (max_tokens − estimate) in
// a window; a reservation of the whole bound never overdraws, but holds
// tokens the request will not use until it is settled, so the key refuses
// sooner, and refuses outright a request whose prompt plus max_tokens
// exceeds the token limit.
type ReserveMode uint8

const (
	// ReserveEstimate reserves the prompt plus the smaller of max_tokens
	// and 1.5× the key's average completion: it admits more, and may
	// overdraw.
	ReserveEstimate ReserveMode = iota
	// ReserveMaxTokens reserves the prompt plus max_tokens
	// (Policy.DefaultMaxTokens when the request gives none): a request
	// whose upstream honours its max_tokens never settles past the limit.
	ReserveMaxTokens
)

// String returns "estimate" or "max_tokens", the names of the config.
func (m ReserveMode) String() string {
	if m == ReserveMaxTokens {
		return "max_tokens"
	}
	return "estimate"
}

// Defaults for zero fields of Limits and Policy. DefaultCompletionFactor is
// the fixed factor applied to a key's average completion in the token
// estimate.
const (
	DefaultWindow           = 60 * time.Second
	DefaultLeaseTTL         = 120 * time.Second
	DefaultBuckets          = 60
	DefaultMaxTokens        = 4096
	DefaultQueueLen         = 1024
	DefaultAging            = 5 * time.Second
	DefaultCompletionFactor = 1.5
)

// Policy holds the settings shared by every Budget of a table: they are
// per-deployment, not per-key. A zero (or negative) field takes the Default
// of the same name.
type Policy struct {
	Buckets          int           // buckets per window: granularity of the sliding window (at most 4096)
	DefaultMaxTokens int64         // completion estimate when a request has no max_tokens
	QueueLen         int           // waiters per key before queue_full
	Aging            time.Duration // a batch waiter ranks as an interactive one enqueued Aging later

	// IDs draws lease ids. Lease ids are what a client settles, renews
	// and cancels with, so they must not be guessable: give a source of
	// uniformly random 64-bit values (crypto/rand-backed). A Budget draws
	// again on 0 or on an id one of its live leases holds. It must be safe
	// for concurrent use (different keys draw concurrently). nil numbers
	// leases 1, 2, 3… per key, as tickets always are: deterministic, for
	// tests and simulations only.
	IDs func() uint64
}

// Dimension names what refused a request.
type Dimension uint8

const (
	None        Dimension = iota // admitted
	Requests                     // request window full
	Tokens                       // token window full
	Concurrency                  // no free slot
	QueueFull                    // the wait queue is at QueueLen
	// TableFull: the key is new and its table holds MaxKeys keys, none of
	// them idle enough to evict (ErrTableFull). A Budget never answers it;
	// a Table's caller turns Do's ErrTableFull into it where a decision
	// must travel (a node's answer): it is not the key's limit but the
	// server's, so it is best answered as "unavailable" (503), not 429.
	TableFull
	// Spend: the key's spend limit (Limits.Spend) has no room for the
	// request's cost in this period. Its name is "budget", the config's.
	Spend
	// FairShare: the key is fair (Limits.Fair) and contended, and the
	// request would take its flow past its share (fair.go).
	FairShare
)

// String returns "requests", "tokens", "concurrency", "queue_full",
// "max_keys", "budget", "fair_share" or "" for None.
func (d Dimension) String() string {
	switch d {
	case Requests:
		return "requests"
	case Tokens:
		return "tokens"
	case Concurrency:
		return "concurrency"
	case QueueFull:
		return "queue_full"
	case TableFull:
		return "max_keys"
	case Spend:
		return "budget"
	case FairShare:
		return "fair_share"
	}
	return ""
}

// Priority is a waiter's class. Interactive waiters go before batch waiters,
// FIFO within a class, with aging (Policy.Aging) so batch is never starved.
type Priority uint8

const (
	Interactive Priority = iota // a person is waiting: served first
	Batch                       // background work; any other value counts as Batch too
)

// Request asks a Budget to admit one request (or Hits requests at once,
// under one lease). Token amounts and Hits are capped at 2^48; negative
// token amounts count as 0 (absent, for MaxTokens and Reserve).
type Request struct {
	PromptTokens int64 // T_in, counted by the caller
	MaxTokens    int64 // the request's max_tokens; 0 means absent (Policy.DefaultMaxTokens)
	// Reserve, if > 0, is the tokens to reserve instead of the key's
	// estimate: what a chain's first key reserved, which its other keys
	// follow, or an exact amount (a request that has no completion, a hot
	// key's slice). A key whose Limits.Reserve is ReserveMaxTokens reserves
	// at least PromptTokens + MaxTokens even then: a chain's key never
	// reserves less than its own mode asks of a request that gives
	// max_tokens.
	Reserve  int64
	Priority Priority      // the wait queue class, if it queues
	Wait     time.Duration // how long the caller may queue; 0 answers at once

	// Hits is how many requests the admission counts in the request
	// window (Envoy's hits_addend); 0 or negative means 1. It is
	// admitted only if Hits more fit, and its lease still holds one slot
	// and reserves the tokens once; a Cancel of it removes all Hits.
	Hits int64

	// Lease, if not 0, is the lease id the admission takes, chosen by the
	// caller (derived from something both of its calls know, so that a
	// later call names the lease without keeping state); 0: the Budget
	// draws one. While a live lease holds that id, an Acquire naming it
	// is a repeat: it admits nothing and answers Allowed with that
	// lease. See Budget.Acquire.
	Lease uint64

	// Price is what the request's model costs: a key with a spend limit
	// reserves the request's estimated cost at it (its token
	// reservation's prompt at Input, the rest at Output) and settles the
	// real usage's cost at it. A zero Price costs nothing.
	Price Price

	// Flow names who asks (a tenant, at its pool) and Weight its weight
	// (≤ 0 counts as 1), for a key whose Limits.Fair shares it among
	// flows; "" is no flow, first come, first served.
	Flow   string
	Weight int64
}

// Usage is what the provider reported for a finished request. Negative
// values count as 0.
type Usage struct {
	PromptTokens     int64 // input tokens actually billed
	CompletionTokens int64 // output tokens actually generated
	// CachedTokens and CacheWriteTokens are the parts of PromptTokens
	// read from and written to the provider's prompt cache: they change
	// only what the request costs (Price), not the tokens it counts.
	CachedTokens, CacheWriteTokens int64
}

// DimStatus is one dimension as seen by a caller: OpenAI's x-ratelimit-* and
// the IETF RateLimit fields. Limit 0 means unlimited. Reset is the time until
// the dimension is fully free again (window slid, slots expired).
//
// What is counted may exceed the limit, though no admission ever takes it
// there: a settle whose usage exceeds its reservation (ReserveEstimate's
// risk), a debt charged (Budget.Charge), a limit lowered below what is
// counted. Remaining is then 0 and Overdraft says by how much: the window
// must drain that much (the slots expire or end) before Remaining grows.
type DimStatus struct {
	Limit     int64         // the limit; 0: unlimited
	Remaining int64         // room left now; 0 when unlimited or overdrawn
	Overdraft int64         // how far what is counted is past Limit; 0 when within it, and when unlimited
	Reset     time.Duration // until nothing is counted any more, if nothing else is admitted
}

// Status is a key's dimensions: requests and tokens in the window, slots
// in use, and its spend in the period.
type Status struct {
	Requests, Tokens, Concurrency DimStatus
	Spend                         SpendStatus // zero unless the key has a spend limit
}

// Decision is the answer to an Acquire, or a Grant delivered later to a waiter.
type Decision struct {
	Allowed    bool
	Queued     bool          // not decided yet: the request waits; Ticket identifies it
	Ticket     uint64        // set when Queued; the later Grant carries it
	Lease      uint64        // set when Allowed: settle, renew or cancel with it
	Reserved   int64         // tokens reserved when Allowed
	Reason     Dimension     // set when refused
	RetryAfter time.Duration // when refused: when enough capacity will be free
	Status     Status        // the key after this decision
}

// Grant is the outcome for a queued request: admitted (Decision.Allowed) or
// refused because its deadline passed (Reason set, RetryAfter honest).
type Grant struct {
	Ticket   uint64
	Decision Decision
}

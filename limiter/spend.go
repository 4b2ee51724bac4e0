package limiter

import (
	"strconv"
	"time"
)

// A key's spend: dollars per Period (Limits.Spend), reserved at admission
// from the request's Price and settled with the real usage's cost, the
// same two phases as its tokens. Amounts are integer picodollars
// (10⁻¹² USD), so a price of any number of micro-dollars per million
// tokens times a token count is exact: nothing charged is ever rounded.

// Price is what a model's tokens cost, in picodollars per token: the same
// number as micro-dollars per million tokens, the unit price lists use
// ($0.15 per million tokens is 150000). A zero field is free; negative
// ones count as 0.
type Price struct {
	Input       int64 // a prompt token not read from or written to the provider's cache
	CachedInput int64 // a prompt token read from the cache (OpenAI's cached_tokens, Anthropic's cache_read_input_tokens)
	CacheWrite  int64 // a prompt token written to the cache (Anthropic's cache_creation_input_tokens)
	Output      int64 // a completion token
}

// MaxSpend caps a spend limit, one request's cost and what a key counts
// as spent: 2^60 picodollars, about $1.15 million, so that sums of a few
// of them cannot overflow.
const MaxSpend = 1 << 60

// mulSat is tokens × price, at most MaxSpend; negative values count as 0.
func mulSat(tokens, price int64) int64 {
	if tokens <= 0 || price <= 0 {
		return 0
	}
	if tokens > MaxSpend/price {
		return MaxSpend
	}
	return min(tokens*price, MaxSpend)
}

// Cost is what usage u costs at p, in picodollars (at most MaxSpend): the
// prompt's cache reads at CachedInput, its cache writes at CacheWrite, the
// rest of the prompt at Input, the completion at Output. Cache reads and
// writes are parts of PromptTokens (each clamped to what is left of it).
func (p Price) Cost(u Usage) int64 {
	prompt := clampUnits(u.PromptTokens)
	cached := min(clampUnits(u.CachedTokens), prompt)
	written := min(clampUnits(u.CacheWriteTokens), prompt-cached)
	c := mulSat(prompt-cached-written, p.Input) + mulSat(cached, p.CachedInput) +
		mulSat(written, p.CacheWrite) + mulSat(clampUnits(u.CompletionTokens), p.Output)
	return min(c, MaxSpend)
}

// reserveCost is what a key reserves of its spend for a request of prompt
// tokens reserving tok tokens in all: the prompt at Input and the rest at
// Output, the estimate the token reservation makes; under
// ReserveMaxTokens the prompt at the dearest of the prompt prices, so
// that no settle of a request within its max_tokens costs more.
func (p Price) reserveCost(prompt, tok int64, mode ReserveMode) int64 {
	prompt = min(clampUnits(prompt), tok)
	in := p.Input
	if mode == ReserveMaxTokens {
		in = max(p.Input, p.CachedInput, p.CacheWrite)
	}
	return min(mulSat(prompt, in)+mulSat(tok-prompt, p.Output), MaxSpend)
}

// spending is a key's spend in its current period. Allocated on the first
// admission under a spend limit, so a key without one pays a nil pointer.
type spending struct {
	start, end int64 // the current period, unix ns: start ≤ the key's latest time < end
	spent      int64 // picodollars settled, released or expired in the period
	held       int64 // picodollars reserved by live leases: the sum of leases' reserved
	leases     map[uint64]spendLease
}

// spendLease is what a live lease reserved of its key's spend, and the
// price its settle charges at.
type spendLease struct {
	reserved int64
	price    Price
}

// maxSpent caps spending.spent: settles past the limit add up, and must
// not overflow.
const maxSpent = 4 * MaxSpend

// spendingAt returns b's spending, made for the period holding t if b has
// none yet.
func (b *Budget) spendingAt(t int64) *spending {
	if b.sp == nil {
		s, e := b.lim.Period.bounds(t)
		b.sp = &spending{start: s, end: e}
	}
	return b.sp
}

// rollPeriod forgets what was spent if b's latest time has left the
// period (Limits.Period): exactly once per boundary crossed. What live
// leases hold stays held; their settles charge the new period.
func (b *Budget) rollPeriod() {
	if s := b.sp; s != nil && (b.last >= s.end || b.last < s.start) {
		s.start, s.end = b.lim.Period.bounds(b.last)
		s.spent = 0
	}
}

// spendUsed is what b's spend counts against its limit: spent and held.
func (b *Budget) spendUsed() int64 {
	if b.sp == nil {
		return 0
	}
	return b.sp.spent + b.sp.held
}

// fitSpend returns how long after t b's spend has room for cost more,
// if nothing else happens: 0 if it has now; until the period ends if
// what is spent leaves no room, else until the last live lease holding
// spend expires (its reservation is then spent, or freed earlier by a
// settle or a cancel: a bound, not a promise).
func (b *Budget) fitSpend(t, cost int64) int64 {
	l := b.lim.Spend
	if l <= 0 || b.spendUsed()+cost <= l {
		return 0
	}
	s := b.spendingAt(t)
	if s.spent+cost > l {
		return max(0, min(s.end, t+int64(maxDuration))-t)
	}
	return b.slotReset(t)
}

// holdSpend records that lease id reserved cost at p.
func (b *Budget) holdSpend(t int64, id uint64, cost int64, p Price) {
	s := b.spendingAt(t)
	if s.leases == nil {
		s.leases = make(map[uint64]spendLease)
	}
	s.leases[id] = spendLease{reserved: cost, price: p}
	s.held += cost
}

// endSpend ends lease id's hold: what it held is freed, and charge is
// spent in its place (0 for a cancel). It reports how far the charge took
// the spend past the limit beyond where it was (0 within it).
func (b *Budget) endSpend(id uint64, charge func(spendLease) int64) (over int64) {
	s := b.sp
	if s == nil {
		return 0
	}
	sl, ok := s.leases[id]
	if !ok {
		return 0
	}
	before := b.spendOver()
	delete(s.leases, id)
	s.held -= sl.reserved
	s.spent = min(s.spent+charge(sl), maxSpent)
	return max(b.spendOver()-before, 0)
}

// spendOver is how far b's spend is past its limit: 0 within it, and
// when unlimited.
func (b *Budget) spendOver() int64 {
	if l := b.lim.Spend; l > 0 {
		return max(b.spendUsed()-l, 0)
	}
	return 0
}

func reservedCost(sl spendLease) int64 { return sl.reserved }
func noCost(spendLease) int64          { return 0 }

// SpendStatus is a key's spend in its current period, in picodollars.
// DimStatus's Remaining is the limit less what is spent and held, its
// Overdraft how far those are past the limit, its Reset the time until
// the period ends (0 for a Total period).
type SpendStatus struct {
	DimStatus
	Spent int64     // settled, released or expired in the period
	Held  int64     // reserved by requests in flight
	Start time.Time // the period's start; zero for a key that has spent nothing
}

// spendStatus is b's SpendStatus at t: zero unless b has a spend limit.
func (b *Budget) spendStatus(t int64) SpendStatus {
	l := b.lim.Spend
	if l <= 0 {
		return SpendStatus{}
	}
	var st SpendStatus
	reset := int64(0)
	if s := b.sp; s != nil {
		st.Spent, st.Held, st.Start = s.spent, s.held, time.Unix(0, s.start)
		if s.end < endOfTime {
			reset = max(0, s.end-t)
		}
	} else if _, e := b.lim.Period.bounds(t); e < endOfTime {
		reset = max(0, e-t)
	}
	st.DimStatus = dimStatus(l, st.Spent+st.Held, reset)
	return st
}

// USD writes an amount of picodollars as US dollars, exactly, with at
// least two decimal places: "25.00", "0.000123456789", "-1.50".
func USD(picodollars int64) string { return string(AppendUSD(nil, picodollars)) }

// AppendUSD appends USD(picodollars) to dst.
func AppendUSD(dst []byte, picodollars int64) []byte {
	u := uint64(picodollars)
	if picodollars < 0 {
		dst, u = append(dst, '-'), uint64(-picodollars)
	}
	dst = strconv.AppendUint(dst, u/1e12, 10)
	var frac [13]byte
	f := strconv.AppendUint(frac[:0], u%1e12+1e12, 10)[1:] // 12 digits
	n := len(f)
	for n > 2 && f[n-1] == '0' {
		n--
	}
	return append(append(dst, '.'), f[:n]...)
}

package rls

// A request's descriptors resolved against the config: what each asks of
// its key (a router.Hit) and how its answer is reported.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/rls/descriptors"
	"github.com/tokenring/tokenring/router"
)

// Input bounds. A request beyond them is refused (INVALID_ARGUMENT) and
// charges nothing.
const (
	// MaxDescriptors is the most descriptors of one request.
	MaxDescriptors = router.MaxHits
	// MaxEntries is the most entries of one descriptor.
	MaxEntries = 32
	// MaxEntryBytes bounds the bytes of an entry's key and of its value.
	MaxEntryBytes = 1024
	// MaxHitsAddend bounds a descriptor's hits_addend: requests, or tokens
	// of a usage (router.MaxTokens).
	MaxHitsAddend = router.MaxTokens
)

// KeyLeaseTTL is the lease TTL of a descriptor key that counts only
// requests (no tokens_per_unit, no concurrency): nothing ever settles its
// leases, which exist only so that an all-or-nothing refusal can cancel
// them, for a few milliseconds. Expiring leaves the request counted (the
// safe side); a short TTL keeps a key taking thousands of hits a second
// from holding minutes of leases.
const KeyLeaseTTL = time.Second

// overrideSep starts the suffix of an override's key: the descriptor's
// key, overrideSep, and the override's window in seconds. Entries never
// hold a control character (checkEntries), so it cannot come from them.
const overrideSep = "\x1fo:"

// kind is what one descriptor of a request asks.
type kind uint8

const (
	noLimit   kind = iota // no limit matches: OK, no current_limit, nothing charged
	unlimited             // OK, limit_remaining 2^32-1, nothing charged
	refuseAll             // a request limit of 0: OVER_LIMIT, nothing charged
	hit                   // decided at its key: plan.hits[item.hit]
)

// dim is the dimension of a key's status an answer reports.
type dim uint8

const (
	dimRequests dim = iota
	dimTokens
	dimConcurrency
)

// item is one descriptor of a request, resolved.
type item struct {
	kind   kind
	hit    int     // kind hit: its index in plan.hits
	op     node.Op // kind hit: plan.hits[hit].Op
	dim    dim
	shadow bool // shadow_mode: over is reported OK
	quota  bool // quota_mode: over refuses only when every quota limit is
	// current_limit: the limit of dim per unit, and the rule's name.
	perUnit uint32
	unit    descriptors.Unit
	name    string
	hits    int64  // the hits the stats count
	stat    string // the stat key without the domain ("" for no stats)
}

// plan is a request's descriptors, resolved: items in the request's order,
// and the hits they ask of their keys.
type plan struct {
	domain string
	items  []item
	hits   []router.Hit
}

// planner resolves requests. Its zero value estimates a token
// reservation's completion with the node's default.
type planner struct {
	maxTokens int64 // limiter.Request.MaxTokens of a token reservation; 0: the node's default_max_tokens
}

// check validates req, every field Envoy sets, before anything else: an
// error is INVALID_ARGUMENT.
func check(req *pb.RateLimitRequest) error {
	switch {
	case req.GetDomain() == "":
		return status.Error(codes.InvalidArgument, "domain is required")
	case len(req.GetDomain()) > MaxEntryBytes:
		return status.Errorf(codes.InvalidArgument, "domain longer than %d bytes", MaxEntryBytes)
	case len(req.GetDescriptors()) == 0:
		return status.Error(codes.InvalidArgument, "descriptors: at least one is required")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return status.Errorf(codes.InvalidArgument, "descriptors: at most %d, got %d", MaxDescriptors, len(req.GetDescriptors()))
	}
	if err := checkText("domain", req.GetDomain()); err != nil {
		return err
	}
	for i, d := range req.GetDescriptors() {
		if err := checkDescriptor(d); err != nil {
			return status.Errorf(codes.InvalidArgument, "descriptors[%d]: %s", i, status.Convert(err).Message())
		}
	}
	return nil
}

func checkDescriptor(d *ratelimitv3.RateLimitDescriptor) error {
	switch {
	case len(d.GetEntries()) == 0:
		return status.Error(codes.InvalidArgument, "entries: at least one is required")
	case len(d.GetEntries()) > MaxEntries:
		return status.Errorf(codes.InvalidArgument, "entries: at most %d, got %d", MaxEntries, len(d.GetEntries()))
	case d.GetIsNegativeHits():
		return status.Error(codes.InvalidArgument, "is_negative_hits is not supported: hits are never given back")
	case d.GetHitsAddend() != nil && d.GetHitsAddend().GetValue() > MaxHitsAddend:
		return status.Errorf(codes.InvalidArgument, "hits_addend: at most %d, got %d", MaxHitsAddend, d.GetHitsAddend().GetValue())
	}
	for j, e := range d.GetEntries() {
		switch {
		case e.GetKey() == "":
			return status.Errorf(codes.InvalidArgument, "entries[%d]: key is required", j)
		case len(e.GetKey()) > MaxEntryBytes || len(e.GetValue()) > MaxEntryBytes:
			return status.Errorf(codes.InvalidArgument, "entries[%d]: key or value longer than %d bytes", j, MaxEntryBytes)
		}
		if err := checkText(fmt.Sprintf("entries[%d].key", j), e.GetKey()); err != nil {
			return err
		}
		if err := checkText(fmt.Sprintf("entries[%d].value", j), e.GetValue()); err != nil {
			return err
		}
	}
	if o := d.GetLimit(); o != nil {
		if _, err := overrideWindow(o); err != nil {
			return err
		}
	}
	return nil
}

// checkText refuses a control character (the key separators' guarantee)
// and invalid UTF-8 (which protobuf already refuses for a string field).
func checkText(field, s string) error {
	for _, c := range s {
		if c < 0x20 || c == 0x7f || c == 0xfffd {
			return status.Errorf(codes.InvalidArgument, "%s holds a control character or invalid UTF-8", field)
		}
	}
	return nil
}

// overrideWindow is the window of a limit override: its unit times its
// unit_multiplier (1 when unset).
func overrideWindow(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) (time.Duration, error) {
	d := descriptors.Unit(o.GetUnit()).Duration()
	if d == 0 {
		return 0, status.Errorf(codes.InvalidArgument, "limit.unit %v is not a unit", o.GetUnit())
	}
	if m := o.GetUnitMultiplier(); m != nil {
		if m.GetValue() == 0 || time.Duration(m.GetValue()) > 366*24*time.Hour/d {
			return 0, status.Errorf(codes.InvalidArgument, "limit.unit_multiplier must be 1 or more, and the window at most 366 days; got %d", m.GetValue())
		}
		d *= time.Duration(m.GetValue())
	}
	return d, nil
}

// LeaseID is the lease id a token reservation of key for request id rid
// takes, so that the call at the request's end names it without either
// call keeping state: an xxhash of both, never 0.
func LeaseID(key, rid string) uint64 {
	h := xxhash.New()
	_, _ = h.WriteString(key)
	_, _ = h.Write([]byte{0})
	_, _ = h.WriteString(rid)
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1
}

// tokenLimit reports whether l counts tokens or slots: its calls pair up.
func tokenLimit(l *descriptors.Limit) bool { return l.TokensPerUnit > 0 || l.Concurrency > 0 }

// plan resolves req (checked) against cfg: every descriptor's limit (its
// override when it sends one, which needs setLimits), the replaces among
// them, and what each asks of its key. An error is a gRPC status: NOT_FOUND
// for a domain no file declares, PERMISSION_DENIED for an override from a
// caller that may not send limits.
func (pl planner) plan(d *descState, req *pb.RateLimitRequest, setLimits bool, p *plan) error {
	p.domain = req.GetDomain()
	if d == nil || !d.domains[p.domain] {
		return status.Errorf(codes.NotFound, "unknown domain %q: no file of rls.config_dir declares it", p.domain)
	}
	descs := req.GetDescriptors()
	p.items = p.items[:0]
	p.hits = p.hits[:0]
	ms := make([]match, len(descs))
	limits := make([]*descriptors.Limit, len(descs))
	for i, dd := range descs {
		if dd.GetLimit() != nil && !setLimits {
			return status.Errorf(codes.PermissionDenied, "descriptors[%d] sends a limit override, which this client may not (clients: may_set_limits)", i)
		}
		m := &ms[i]
		m.entries = make([]descriptors.Entry, len(dd.GetEntries()))
		for j, e := range dd.GetEntries() {
			m.entries[j] = descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		m.limit, m.rid, m.key, _ = d.cfg.MatchKey(p.domain, m.entries)
		limits[i] = m.limit
	}
	for i, kept := range descriptors.Replace(limits) {
		if !kept {
			ms[i].limit = nil
		}
	}
	for i, dd := range descs {
		p.items = append(p.items, pl.item(req, dd, &ms[i], p))
	}
	return nil
}

// match is what the config says of one descriptor: its entries, the limit
// that applies (nil: none, or replaced), the request id and the key.
type match struct {
	entries []descriptors.Entry
	limit   *descriptors.Limit
	rid     string
	key     string
}

// item resolves one descriptor d of req, matched as m.
func (pl planner) item(req *pb.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor, m *match, p *plan) item {
	hits := int64(max(1, req.GetHitsAddend()))
	set := d.GetHitsAddend() != nil
	if set {
		hits = int64(d.GetHitsAddend().GetValue())
	}
	if o := d.GetLimit(); o != nil {
		return pl.override(p, m, o, hits)
	}
	l, key, rid := m.limit, m.key, m.rid
	if l == nil {
		return item{kind: noLimit}
	}
	if l.Unlimited {
		return item{kind: unlimited}
	}
	it := item{shadow: l.ShadowMode, quota: l.QuotaMode, unit: l.Unit, name: l.Name, hits: hits, stat: statKey(p.domain, l.Stat)}
	soft := l.ShadowMode || l.QuotaMode
	if !tokenLimit(l) {
		it.dim, it.perUnit = dimRequests, l.RequestsPerUnit
		if l.DeniesAll() {
			it.kind = refuseAll
			return it
		}
		if hits == 0 {
			return p.add(it, router.Hit{Op: node.OpStatus, Key: key})
		}
		return p.add(it, router.Hit{Op: node.OpAcquire, Key: key, Req: limiter.Request{Hits: hits}, Shadow: soft})
	}
	switch {
	case l.TokensPerUnit > 0:
		it.dim, it.perUnit = dimTokens, clamp32(l.TokensPerUnit)
	case l.RequestsPerUnit > 0:
		it.dim, it.perUnit = dimRequests, l.RequestsPerUnit
	default:
		it.dim, it.perUnit = dimConcurrency, clamp32(l.Concurrency)
	}
	switch {
	case rid != "" && (!set || hits == 0):
		// The request path: reserve. A hits_addend of 0 is Envoy
		// Gateway's request path ("cost: request: {number: 0}"), never a
		// usage worth settling: a stream that reports none keeps its
		// reservation and slot until the lease TTL (a repeat of the
		// reservation charges nothing).
		if set {
			hits = int64(max(1, req.GetHitsAddend()))
			it.hits = hits
		}
		r := limiter.Request{Hits: hits, Lease: LeaseID(key, rid), MaxTokens: pl.maxTokens}
		return p.add(it, router.Hit{Op: node.OpAcquire, Key: key, Req: r, Shadow: soft})
	case rid != "": // the stream's end: settle, with the real usage
		return p.add(it, router.Hit{Op: node.OpSettle, Key: key, Lease: LeaseID(key, rid), Usage: limiter.Usage{CompletionTokens: hits}})
	case set && hits > 0: // usage with nothing to settle: counted
		return p.add(it, router.Hit{Op: node.OpCharge, Key: key, Usage: limiter.Usage{CompletionTokens: hits}})
	}
	it.hits = 0 // without a request id nothing pairs: checked only
	return p.add(it, router.Hit{Op: node.OpStatus, Key: key})
}

// override resolves a descriptor that sends its own limit o: a request
// limit of o's requests_per_unit over o's window, in a key of its own
// (the descriptor's key and the window), with the sent limits applied at
// the owner as a request's are (limiter.Budget.SetSentLimits). It takes
// the matched limit's name and stat key when there is one (no shadow
// mode, as the reference), else the stat key of the entries' keys without
// their values (the reference's has the values: a series per value sent).
func (pl planner) override(p *plan, m *match, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride, hits int64) item {
	window, _ := overrideWindow(o) // checked
	it := item{dim: dimRequests, perUnit: o.GetRequestsPerUnit(), unit: descriptors.Unit(o.GetUnit()), hits: hits}
	base := m.key
	if m.limit != nil {
		it.name, it.stat = m.limit.Name, statKey(p.domain, m.limit.Stat)
	} else {
		base = descriptors.Key(p.domain, m.entries)
		var b strings.Builder
		for i, e := range m.entries {
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(e.Key)
		}
		it.stat = b.String()
	}
	if o.GetRequestsPerUnit() == 0 {
		it.kind = refuseAll
		return it
	}
	key := base + overrideSep + strconv.FormatInt(int64(window/time.Second), 10)
	if hits == 0 {
		return p.add(it, router.Hit{Op: node.OpStatus, Key: key})
	}
	sent := &limiter.Limits{Requests: int64(o.GetRequestsPerUnit()), Window: window, LeaseTTL: KeyLeaseTTL}
	return p.add(it, router.Hit{Op: node.OpAcquire, Key: key, Req: limiter.Request{Hits: hits}, Limits: sent})
}

// add makes it a hit h.
func (p *plan) add(it item, h router.Hit) item {
	it.kind, it.hit, it.op = hit, len(p.hits), h.Op
	p.hits = append(p.hits, h)
	return it
}

// statKey is a limit's stat key without its domain (the counters' label
// beside the domain's).
func statKey(domain, stat string) string {
	if s, ok := strings.CutPrefix(stat, domain+"."); ok {
		return s
	}
	return stat
}

// overrideLimits are the limits of an override's key (overrideSep), for
// the key's owner before a request sends them: its window, no request
// limit yet (every acquire of it sends one).
func overrideLimits(key string) (limiter.Limits, bool) {
	i := strings.LastIndex(key, overrideSep)
	if i < 0 {
		return limiter.Limits{}, false
	}
	secs, err := strconv.ParseInt(key[i+len(overrideSep):], 10, 64)
	if err != nil || secs <= 0 {
		return limiter.Limits{}, false
	}
	return limiter.Limits{Window: time.Duration(secs) * time.Second, LeaseTTL: KeyLeaseTTL}, true
}

// descState is the descriptors in force and their domains.
type descState struct {
	cfg     *descriptors.Config
	domains map[string]bool
}

func newDescState(cfg *descriptors.Config) *descState {
	d := &descState{cfg: cfg, domains: map[string]bool{}}
	for _, name := range cfg.Domains() {
		d.domains[name] = true
	}
	return d
}

// KeyLimits gives the limits of a descriptor key ("d:...") in cfg, for the
// node's LimitsFor and the router's Limits: an override's key its window
// (overrideLimits), any other the file's limits (descriptors.LimitsOf),
// with KeyLeaseTTL when it counts only requests. ok is false for a key cfg
// does not know (a file changed since it was charged): its owner then
// keeps counting it without a limit until it goes idle.
func KeyLimits(cfg *descriptors.Config, key string) (l limiter.Limits, ok bool) {
	if l, ok := overrideLimits(key); ok {
		return l, true
	}
	if cfg == nil {
		return limiter.Limits{}, false
	}
	if l, ok = cfg.LimitsOf(key); !ok {
		return limiter.Limits{}, false
	}
	if l.Tokens <= 0 && l.Concurrency <= 0 {
		l.LeaseTTL = KeyLeaseTTL
	}
	return l, true
}

// clamp32 is n within a uint32.
func clamp32(n int64) uint32 {
	return uint32(min(max(n, 0), math.MaxUint32))
}

package admin

import (
	"cmp"
	"slices"
	"strings"

	"github.com/tokenring/tokenring/router"
)

// The proxy's upstream calls and the pools, as /admin/stats reports a
// member's and /admin/cluster sums them.

// UpstreamStats are the LLM proxy's calls to its upstreams since the node
// started (proxy.Server.Upstream, converted by the front door: admin does
// not import proxy).
type UpstreamStats struct {
	Calls       int64 `json:"calls"`
	Unreachable int64 `json:"unreachable"` // no answer: connection failed or cut before the headers
	Timeouts    int64 `json:"timeouts"`    // no headers within the response_header timeout
	Canceled    int64 `json:"canceled"`    // the client went away first
	Status4xx   int64 `json:"status_4xx"`  // 4xx other than 429
	Status429   int64 `json:"status_429"`
	Status5xx   int64 `json:"status_5xx"`
	// LatencyMS[i] counts the answers whose headers came within
	// LatencyBoundsMS[i] ms (and above the bound before); the last entry,
	// one longer than the bounds, those slower than all. SumMS is their
	// total time, in ms.
	LatencyBoundsMS []int64 `json:"latency_bounds_ms"`
	LatencyMS       []int64 `json:"latency_ms"`
	SumMS           int64   `json:"sum_ms"`
}

// add adds o's counts to u's (the bounds must be the same; u without
// bounds takes o's).
func (u *UpstreamStats) add(o UpstreamStats) {
	u.Calls += o.Calls
	u.Unreachable += o.Unreachable
	u.Timeouts += o.Timeouts
	u.Canceled += o.Canceled
	u.Status4xx += o.Status4xx
	u.Status429 += o.Status429
	u.Status5xx += o.Status5xx
	u.SumMS += o.SumMS
	if u.LatencyBoundsMS == nil {
		u.LatencyBoundsMS = slices.Clone(o.LatencyBoundsMS)
		u.LatencyMS = make([]int64, len(o.LatencyMS))
	}
	if len(u.LatencyMS) == len(o.LatencyMS) {
		for i, c := range o.LatencyMS {
			u.LatencyMS[i] += c
		}
	}
}

// maxPools is how many pools a member lists in /admin/stats, nearest
// their limits first.
const maxPools = router.MaxActivityPools

// poolJSON is a pool: its state at its owner (when some member holds it
// with something used) and the tenants every member admitted through it
// most in the last one to two minutes (router.Activity.PoolTenants,
// summed over the members).
type poolJSON struct {
	Pool   string              `json:"pool"`
	Owner  string              `json:"owner,omitempty"`
	Used   float64             `json:"used"`
	Limits *limitsJSON         `json:"limits,omitempty"`
	Top    []router.PoolTenant `json:"top"`
}

// poolTopShown is how many of a pool's tenants /admin/cluster lists.
const poolTopShown = 5

// mergePools merges the members' pools: their held pools' states and their
// pool tenants' admissions, summed by tenant. The pools come by name, the
// tenants of each heaviest first, at most poolTopShown.
func mergePools(stats []*statsJSON) []poolJSON {
	byName := map[string]*poolJSON{}
	sums := map[string]map[string]int64{}
	get := func(name string) *poolJSON {
		p, ok := byName[name]
		if !ok {
			p = &poolJSON{Pool: name, Top: []router.PoolTenant{}}
			byName[name] = p
			sums[name] = map[string]int64{}
		}
		return p
	}
	for _, s := range stats {
		if s == nil {
			continue
		}
		for _, held := range s.Pools {
			p := get(held.Pool)
			p.Owner, p.Used, p.Limits = held.Owner, held.Used, held.Limits
		}
		for name, top := range s.PoolTenants {
			get(name)
			for _, t := range top {
				sums[name][t.Tenant] += t.Admissions
			}
		}
	}
	out := make([]poolJSON, 0, len(byName))
	for name, p := range byName {
		for t, n := range sums[name] {
			p.Top = append(p.Top, router.PoolTenant{Tenant: t, Admissions: n})
		}
		slices.SortFunc(p.Top, func(x, y router.PoolTenant) int {
			if c := cmp.Compare(y.Admissions, x.Admissions); c != 0 {
				return c
			}
			return strings.Compare(x.Tenant, y.Tenant)
		})
		p.Top = p.Top[:min(len(p.Top), poolTopShown)]
		out = append(out, *p)
	}
	slices.SortFunc(out, func(x, y poolJSON) int { return strings.Compare(x.Pool, y.Pool) })
	return out
}

// mergeSeries sums the members' points by second, oldest first.
func mergeSeries(stats []*statsJSON) []pointJSON {
	by := map[int64]*pointJSON{}
	for _, s := range stats {
		if s == nil {
			continue
		}
		for _, p := range s.Series {
			q, ok := by[p.T]
			if !ok {
				q = &pointJSON{T: p.T}
				by[p.T] = q
			}
			q.Allowed += p.Allowed
			q.Refused += p.Refused
			q.Fallbacks += p.Fallbacks
		}
	}
	out := make([]pointJSON, 0, len(by))
	for _, p := range by {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(x, y pointJSON) int { return cmp.Compare(x.T, y.T) })
	if len(out) > seriesPoints {
		out = out[len(out)-seriesPoints:]
	}
	return out
}

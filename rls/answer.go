package rls

// A request's answer: each descriptor's status from what its key said, the
// overall code, the RateLimit headers, and the counters.

import (
	"math"
	"strconv"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
)

// The RateLimit headers (draft-polli-ratelimit-headers-03) written with
// Config.ResponseHeaders, under the names the reference writes with
// LIMIT_RESPONSE_HEADERS_ENABLED (its defaults).
const (
	HeaderLimit     = "RateLimit-Limit"
	HeaderRemaining = "RateLimit-Remaining"
	HeaderReset     = "RateLimit-Reset"
)

// nearLimitRatio is the share of a limit past which hits count as
// near_limit: the reference's NEAR_LIMIT_RATIO default.
const nearLimitRatio = 0.8

// answer is the response to p's request, its keys having said res (in the
// order of p.hits); headers adds the RateLimit headers. It counts each
// descriptor's hits in m (nil: none).
func answer(p *plan, res []router.HitResult, headers bool, m *metrics) *pb.RateLimitResponse {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(p.items))}
	var closest *pb.RateLimitResponse_DescriptorStatus
	minRemaining := uint32(math.MaxUint32)
	quotas, quotasOver := 0, 0
	for i := range p.items {
		it := &p.items[i]
		st := statusOf(it, res)
		resp.Statuses[i] = st
		// The reference's choice of the descriptor the headers describe:
		// the one with the least remaining, an over-limit one above all.
		if st.CurrentLimit != nil && st.LimitRemaining < minRemaining {
			closest, minRemaining = st, st.LimitRemaining
		}
		if it.quota {
			quotas++
		}
		switch {
		case st.Code != pb.RateLimitResponse_OVER_LIMIT:
		case it.quota: // quota mode: over only when every quota limit is
			quotasOver++
		default:
			resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
			closest, minRemaining = st, 0
		}
		m.count(p.domain, it, res)
	}
	if quotas > 0 && quotas == quotasOver {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	if headers && closest != nil {
		resp.ResponseHeadersToAdd = []*core.HeaderValue{
			{Key: HeaderLimit, Value: strconv.FormatUint(uint64(closest.CurrentLimit.RequestsPerUnit), 10)},
			{Key: HeaderRemaining, Value: strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
			{Key: HeaderReset, Value: strconv.FormatInt(ceilSeconds(closest.DurationUntilReset.AsDuration()), 10)},
		}
	}
	return resp
}

// statusOf is the status of item it.
func statusOf(it *item, res []router.HitResult) *pb.RateLimitResponse_DescriptorStatus {
	switch it.kind {
	case noLimit:
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
	case unlimited:
		return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	}
	st := &pb.RateLimitResponse_DescriptorStatus{
		Code:         pb.RateLimitResponse_OK,
		CurrentLimit: &pb.RateLimitResponse_RateLimit{Name: it.name, RequestsPerUnit: it.perUnit, Unit: pb.RateLimitResponse_RateLimit_Unit(it.unit)},
	}
	if it.kind == refuseAll {
		if !it.shadow {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
		}
		st.DurationUntilReset = durationpb.New(it.unit.Duration())
		return st
	}
	r := &res[it.hit]
	d := dimOf(&r.Status, it.dim)
	over, reset := over(it, r, d)
	if !over {
		st.LimitRemaining = clamp32(d.Remaining)
		if d.Limit == 0 { // the dimension is not limited at the owner (yet)
			st.LimitRemaining = it.perUnit
		}
	}
	if over && !it.shadow {
		st.Code = pb.RateLimitResponse_OVER_LIMIT
	}
	st.DurationUntilReset = durationpb.New(reset)
	return st
}

// over reports whether it is over its limit given what its key said r,
// d being r's status in it's dimension, and the duration until reset to
// report: an OVER_LIMIT's until the hit would fit, an OK's until the
// dimension is free again.
func over(it *item, r *router.HitResult, d *limiter.DimStatus) (bool, time.Duration) {
	switch {
	case r.Refused:
		return true, r.RetryAfter
	case it.op != node.OpStatus:
		return false, d.Reset
	}
	// Checked only: over when there is no room left for one more hit.
	for _, x := range []limiter.DimStatus{r.Status.Requests, r.Status.Tokens, r.Status.Concurrency} {
		if x.Limit > 0 && x.Remaining <= 0 {
			return true, x.Reset
		}
	}
	return false, d.Reset
}

// dimOf is st's dimension d.
func dimOf(st *limiter.Status, d dim) *limiter.DimStatus {
	switch d {
	case dimTokens:
		return &st.Tokens
	case dimConcurrency:
		return &st.Concurrency
	}
	return &st.Requests
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64((max(d, 0) + time.Second - 1) / time.Second)
}

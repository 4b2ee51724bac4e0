package rls

import (
	"strconv"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tokenring/tokenring/api"
	"github.com/tokenring/tokenring/internal/promtest"
	"github.com/tokenring/tokenring/rls/descriptors"
)

func typeUnit(u descriptors.Unit) typev3.RateLimitUnit { return typev3.RateLimitUnit(u) }

// TestReferenceExamples sends the descriptors of the reference README's
// examples (testdata/config) as Envoy's filter sends them, and checks
// every answer field by field: a limit and its remaining, a descriptor no
// limit matches (OK, no current_limit), a limit of 0 (the black list),
// shadow mode (over, answered OK), replaces.
func TestReferenceExamples(t *testing.T) {
	h := start(t, setup{})
	now := h.clock.Now()
	sec := resetAt(time.Second, now, now)

	// Example 1: 500 a second for database=users; database=other matches nothing.
	resp := h.must(t, request("mongo_cps", 0, desc("database", "users"), desc("database", "other")))
	expect(t, "example 1", resp, pb.RateLimitResponse_OK, ok(500, descriptors.Second, "", 499, sec), noLimitStatus)

	// Example 3: 10 a second per address; 50.0.0.5 has 0: always over.
	resp = h.must(t, request("edge_proxy_per_ip", 0, desc("remote_address", "10.0.0.1")))
	expect(t, "example 3", resp, pb.RateLimitResponse_OK, ok(10, descriptors.Second, "", 9, sec))
	resp = h.must(t, request("edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.5")))
	expect(t, "example 3, black list", resp, pb.RateLimitResponse_OVER_LIMIT, overLimit(0, descriptors.Second, "", time.Second))

	// Example 6: user-a's 10 a second are in shadow mode: the 11th is over,
	// answered OK and counted; user-b's 20 refuse.
	for i := range 10 {
		resp = h.must(t, request("example6", 0, desc("service", "s", "user", "user-a")))
		expect(t, "example 6, user-a "+strconv.Itoa(i), resp, pb.RateLimitResponse_OK, ok(10, descriptors.Second, "", uint32(9-i), sec))
	}
	resp = h.must(t, request("example6", 0, desc("service", "s", "user", "user-a")))
	shadowed := overLimit(10, descriptors.Second, "", sec)
	shadowed.Code = pb.RateLimitResponse_OK
	expect(t, "example 6, user-a over in shadow mode", resp, pb.RateLimitResponse_OK, shadowed)
	if got := promtest.Counter(t, h.reg, "tokenring_rls_shadow_mode_total", "example6", "service.user_user-a"); got != 1 {
		t.Errorf("shadow_mode counted %v, want 1", got)
	}

	// Example 7: with key_2's limit in the request, key_1's specific_limit
	// (5) is replaced: only the 10 count.
	resp = h.must(t, request("example7", 0, desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")))
	expect(t, "example 7", resp, pb.RateLimitResponse_OK, noLimitStatus, ok(10, descriptors.Second, "", 9, sec))
	resp = h.must(t, request("example7", 0, desc("key_1", "value_1", "user", "bkthomps")))
	expect(t, "example 7, alone", resp, pb.RateLimitResponse_OK, ok(5, descriptors.Second, "specific_limit", 4, sec))
}

// TestHitsAtTheBoundary: hits_addend 0 (counts 1), N, per descriptor N and
// 0 (checked only), exact to the last hit; a refused hit charges nothing,
// and the window frees what it counted a unit later.
func TestHitsAtTheBoundary(t *testing.T) {
	h := start(t, setup{})
	const day = 24 * time.Hour
	t0 := h.clock.Now()
	x := func(hits uint32, d ...uint64) *pb.RateLimitRequest {
		dd := desc("to_number", "2061111111")
		if len(d) > 0 {
			dd = withHits(dd, d[0])
		}
		return request("messaging", hits, dd)
	}
	reset := resetAt(day, t0, t0)
	expect(t, "hits_addend 0 counts 1", h.must(t, x(0)), pb.RateLimitResponse_OK, ok(100, descriptors.Day, "", 99, reset))
	for i, want := range []uint32{69, 39, 9} {
		expect(t, "hits_addend 30 #"+strconv.Itoa(i), h.must(t, x(30)), pb.RateLimitResponse_OK, ok(100, descriptors.Day, "", want, reset))
	}
	expect(t, "10 when 9 are left", h.must(t, x(10)), pb.RateLimitResponse_OVER_LIMIT, overLimit(100, descriptors.Day, "", reset))
	expect(t, "a per-descriptor 9 overrides the request's 10", h.must(t, x(10, 9)), pb.RateLimitResponse_OK, ok(100, descriptors.Day, "", 0, reset))
	h.clock.Advance(time.Hour)
	now := h.clock.Now()
	expect(t, "checked only (0) at the limit", h.must(t, x(1, 0)), pb.RateLimitResponse_OVER_LIMIT, overLimit(100, descriptors.Day, "", resetAt(day, t0, now)))
	expect(t, "one more", h.must(t, x(1)), pb.RateLimitResponse_OVER_LIMIT, overLimit(100, descriptors.Day, "", resetAt(day, t0, now)))
	expect(t, "more than the limit at once", h.must(t, x(101)), pb.RateLimitResponse_OVER_LIMIT, overLimit(100, descriptors.Day, "", day))

	h.clock.Advance(resetAt(day, t0, now))
	now = h.clock.Now()
	expect(t, "checked only, a day later", h.must(t, x(0, 0)), pb.RateLimitResponse_OK, ok(100, descriptors.Day, "", 100, 0))
	expect(t, "a day later", h.must(t, x(0)), pb.RateLimitResponse_OK, ok(100, descriptors.Day, "", 99, resetAt(day, now, now)))
	if got, want := promtest.Counter(t, h.reg, "tokenring_rls_total_hits_total", "messaging", "to_number"), float64(1+90+10+9+1+101+1); got != want {
		t.Errorf("total_hits %v, want %v", got, want)
	}
	if got, want := promtest.Counter(t, h.reg, "tokenring_rls_over_limit_total", "messaging", "to_number"), float64(1+1+101); got != want {
		// 10 when 9 were left: 1 over (9 near); one more: 1; 101 at once: all.
		t.Errorf("over_limit %v, want %v", got, want)
	}
}

// TestResponseHeaders: the RateLimit headers of the descriptor closest to
// its limit, an over-limit one above all, as the reference writes them.
func TestResponseHeaders(t *testing.T) {
	h := start(t, setup{cfg: Config{ResponseHeaders: true}})
	now := h.clock.Now()
	header := func(limit, remaining string, reset time.Duration) []*core.HeaderValue {
		return []*core.HeaderValue{{Key: "RateLimit-Limit", Value: limit}, {Key: "RateLimit-Remaining", Value: remaining},
			{Key: "RateLimit-Reset", Value: strconv.FormatInt(int64((reset+time.Second-1)/time.Second), 10)}}
	}
	check := func(what string, resp *pb.RateLimitResponse, want []*core.HeaderValue) {
		t.Helper()
		got := resp.GetResponseHeadersToAdd()
		if len(got) != len(want) {
			t.Fatalf("%s: headers %v, want %v", what, got, want)
		}
		for i := range want {
			if !proto.Equal(got[i], want[i]) {
				t.Errorf("%s: header %v, want %v", what, got[i], want[i])
			}
		}
	}
	resp := h.must(t, request("messaging", 0, desc("to_number", "1"), desc("message_type", "marketing", "to_number", "1")))
	check("the closest of two", resp, header("5", "4", resetAt(24*time.Hour, now, now)))
	resp = h.must(t, request("messaging", 0, desc("database", "none")))
	check("no limit, no headers", resp, nil)
	resp = h.must(t, request("edge_proxy_per_ip", 0, desc("remote_address", "10.0.0.1"), desc("remote_address", "50.0.0.5")))
	check("an over-limit one", resp, header("0", "0", time.Second))
}

// TestLimitOverride: a descriptor's own limit (Envoy's limit override)
// from a client with may_set_limits counts in a key of its own, exactly;
// from any other client it is PERMISSION_DENIED and charges nothing.
func TestLimitOverride(t *testing.T) {
	h := start(t, setup{clients: api.NewClients(map[string][]string{"gw": {"*"}, "admin": {"*"}}, nil, map[string]bool{"admin": true})})
	now := h.clock.Now()
	over := func() *pb.RateLimitRequest {
		return request("mongo_cps", 0, withLimit(desc("database", "users"), 2, descriptors.Minute), desc("database", "users"))
	}
	if _, err := h.call(t, "gw", over()); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("an override without may_set_limits: %v, want PermissionDenied", err)
	}
	minute := resetAt(time.Minute, now, now)
	sec := resetAt(time.Second, now, now)
	for i, want := range []uint32{1, 0} {
		resp, err := h.call(t, "admin", over())
		if err != nil {
			t.Fatal(err)
		}
		expect(t, "override #"+strconv.Itoa(i), resp, pb.RateLimitResponse_OK, ok(2, descriptors.Minute, "", want, minute), ok(500, descriptors.Second, "", uint32(499-i), sec))
	}
	resp, err := h.call(t, "admin", over())
	if err != nil {
		t.Fatal(err)
	}
	// All or nothing: the override refuses, the file's limit is not charged.
	expect(t, "override over", resp, pb.RateLimitResponse_OVER_LIMIT, overLimit(2, descriptors.Minute, "", minute), ok(500, descriptors.Second, "", 498, sec))
}

// TestAllOrNothing: two descriptors, one full: the other is not charged
// (its status as before), in the request's order whatever the keys'; both
// when the full one's key comes first (nothing reserved) and when it comes
// last (the other's reservation cancelled). Without it (per_descriptor,
// the reference's way) the other is charged.
func TestAllOrNothing(t *testing.T) {
	for _, perDescriptor := range []bool{false, true} {
		t.Run("per_descriptor="+strconv.FormatBool(perDescriptor), func(t *testing.T) {
			h := start(t, setup{cfg: Config{PerDescriptor: perDescriptor}})
			now := h.clock.Now()
			day := resetAt(24*time.Hour, now, now)
			charged := uint32(0)
			if perDescriptor {
				charged = 1
			}
			both := func(number string) *pb.RateLimitRequest {
				return request("messaging", 0, desc("to_number", number), desc("message_type", "marketing", "to_number", number))
			}

			// The marketing key (5 a day) sorts first, and fills first.
			for i := range 5 {
				expect(t, "both #"+strconv.Itoa(i), h.must(t, both("1")), pb.RateLimitResponse_OK,
					ok(100, descriptors.Day, "", uint32(99-i), day), ok(5, descriptors.Day, "", uint32(4-i), day))
			}
			expect(t, "marketing full", h.must(t, both("1")), pb.RateLimitResponse_OVER_LIMIT,
				ok(100, descriptors.Day, "", 95-charged, day), overLimit(5, descriptors.Day, "", day))
			expect(t, "to_number checked", h.must(t, request("messaging", 0, withHits(desc("to_number", "1"), 0))), pb.RateLimitResponse_OK,
				ok(100, descriptors.Day, "", 95-charged, day))

			// The to_number key (100 a day) sorts last: full, it refuses
			// after marketing was reserved, which is cancelled.
			expect(t, "to_number filled", h.must(t, request("messaging", 100, desc("to_number", "2"))), pb.RateLimitResponse_OK,
				ok(100, descriptors.Day, "", 0, day))
			marketing := ok(5, descriptors.Day, "", 5, 0) // nothing counted: no reset
			if perDescriptor {
				marketing = ok(5, descriptors.Day, "", 4, day)
			}
			expect(t, "to_number full", h.must(t, both("2")), pb.RateLimitResponse_OVER_LIMIT, overLimit(100, descriptors.Day, "", day), marketing)
			expect(t, "marketing checked", h.must(t, request("messaging", 0, withHits(desc("message_type", "marketing", "to_number", "2"), 0))), pb.RateLimitResponse_OK, marketing)
		})
	}
}

// TestBadInput: each malformed request gets its gRPC code and charges
// nothing.
func TestBadInput(t *testing.T) {
	h := start(t, setup{})
	valid := desc("database", "users")
	negative := desc("database", "users")
	negative.IsNegativeHits = true
	for _, tc := range []struct {
		what string
		req  *pb.RateLimitRequest
		code codes.Code
	}{
		{"empty domain", request("", 0, valid), codes.InvalidArgument},
		{"no descriptors", request("mongo_cps", 0), codes.InvalidArgument},
		{"a descriptor without entries", request("mongo_cps", 0, valid, desc()), codes.InvalidArgument},
		{"an entry without a key", request("mongo_cps", 0, valid, desc("", "x")), codes.InvalidArgument},
		{"a control character", request("mongo_cps", 0, valid, desc("database", "a\x1fb")), codes.InvalidArgument},
		{"is_negative_hits", request("mongo_cps", 0, valid, negative), codes.InvalidArgument},
		{"an unknown unit", request("mongo_cps", 0, valid, withLimit(desc("database", "users"), 1, descriptors.UnitUnknown)), codes.InvalidArgument},
		{"hits_addend too large", request("mongo_cps", 0, valid, withHits(desc("database", "users"), MaxHitsAddend+1)), codes.InvalidArgument},
		{"unknown domain", request("no_such_domain", 0, valid), codes.NotFound},
	} {
		_, err := h.call(t, "", tc.req)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.code)
		}
	}
	many := request("mongo_cps", 0)
	for range MaxDescriptors + 1 {
		many.Descriptors = append(many.Descriptors, desc("database", "users"))
	}
	if _, err := h.call(t, "", many); status.Code(err) != codes.InvalidArgument {
		t.Errorf("%d descriptors: %v, want InvalidArgument", MaxDescriptors+1, err)
	}
	if n := h.node.Keys(); n != 0 {
		t.Errorf("the node holds %d keys after bad requests only", n)
	}
	now := h.clock.Now()
	expect(t, "then a good one", h.must(t, request("mongo_cps", 0, valid)), pb.RateLimitResponse_OK,
		ok(500, descriptors.Second, "", 499, resetAt(time.Second, now, now)))
	if got := promtest.Counter(t, h.reg, "tokenring_rls_calls_total", "INVALID_ARGUMENT"); got != 9 {
		t.Errorf("calls_total{INVALID_ARGUMENT} %v, want 9", got)
	}
}

// TestAuth: with clients configured, a call without a token, or with an
// unknown one, is UNAUTHENTICATED and charges nothing.
func TestAuth(t *testing.T) {
	h := start(t, setup{clients: api.NewClients(map[string][]string{"gw": {"*"}}, nil, nil)})
	req := request("mongo_cps", 0, desc("database", "users"))
	for _, token := range []string{"", "wrong"} {
		if _, err := h.call(t, token, req); status.Code(err) != codes.Unauthenticated {
			t.Errorf("token %q: %v, want Unauthenticated", token, err)
		}
	}
	now := h.clock.Now()
	resp, err := h.call(t, "gw", req)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "the gateway's token", resp, pb.RateLimitResponse_OK, ok(500, descriptors.Second, "", 499, resetAt(time.Second, now, now)))
}

// TestHealthUntilDrain: grpc.health.v1 says SERVING, for the server and
// for RateLimitService, until Drain, then NOT_SERVING, while calls are
// still decided.
func TestHealthUntilDrain(t *testing.T) {
	h := start(t, setup{})
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := h.health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		if got := check(svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%q: %v before the drain", svc, got)
		}
	}
	h.srv.Drain()
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		if got := check(svc); got != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("%q: %v after the drain", svc, got)
		}
	}
	if resp := h.must(t, request("mongo_cps", 0, desc("database", "users"))); resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Errorf("a call while draining: %v", resp)
	}
}

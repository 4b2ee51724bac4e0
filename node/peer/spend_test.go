package peer

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// TestSpendOnTheWire: an acquire carries its price and its flow, a settle its cached
// tokens, an answer its key's spend, each only when it has one; a member
// that does not know the spend reads the rest of the answer unchanged.
func TestSpendOnTheWire(t *testing.T) {
	acq := Call{Op: OpAcquire, Key: "t:acme", Req: limiter.Request{PromptTokens: 10, Hits: 2,
		Price: limiter.Price{Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000}}}
	if got, err := DecodeCall(AppendCall(nil, &acq)); err != nil || !reflect.DeepEqual(got, acq) {
		t.Fatalf("acquire with a price: %+v %v", got, err)
	}
	fair := Call{Op: OpAcquire, Key: "p:gpt-4o", Req: limiter.Request{Reserve: 10, Flow: "acme", Weight: 3, Price: acq.Req.Price}}
	if got, err := DecodeCall(AppendCall(nil, &fair)); err != nil || !reflect.DeepEqual(got, fair) {
		t.Fatalf("acquire with a flow: %+v %v", got, err)
	}
	if c, err := DecodeCall(append(AppendCall(nil, &Call{Op: OpAcquire, Key: "k"}), flow, 0, 2)); err == nil {
		t.Fatalf("an empty flow decoded: %+v", c)
	}
	free := acq
	free.Req.Price = limiter.Price{}
	if len(AppendCall(nil, &free)) >= len(AppendCall(nil, &acq)) {
		t.Fatal("a free acquire is not shorter")
	}
	set := Call{Op: OpSettle, Key: "t:acme", Lease: 7, Usage: limiter.Usage{PromptTokens: 100, CompletionTokens: 5, CachedTokens: 60, CacheWriteTokens: 30}}
	if got, err := DecodeCall(AppendCall(nil, &set)); err != nil || !reflect.DeepEqual(got, set) {
		t.Fatalf("settle with cached tokens: %+v %v", got, err)
	}
	for _, bad := range [][]byte{
		append(AppendCall(nil, &free), price, 0, 0, 0, 0),                                                    // a price of zeros
		append(AppendCall(nil, &free), cacheUsage, 2, 2),                                                     // a settle's section on an acquire
		append(AppendCall(nil, &Call{Op: OpSettle, Key: "k"}), price, 1, 1, 1, 1),                            // an acquire's on a settle
		append(AppendCall(nil, &free), price, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0), // past MaxSpend
	} {
		if c, err := DecodeCall(bad); err == nil {
			t.Errorf("DecodeCall(%x) = %+v, want an error", bad, c)
		}
	}
	a := Answer{Decision: limiter.Decision{Reason: limiter.Spend, RetryAfter: time.Hour, Status: limiter.Status{
		Requests: limiter.DimStatus{Limit: 10, Remaining: 3},
		Tokens:   limiter.DimStatus{Limit: 100, Overdraft: 4},
		Spend: limiter.SpendStatus{DimStatus: limiter.DimStatus{Limit: 1e12, Remaining: 5, Reset: time.Hour},
			Spent: 1e12 - 20, Held: 15, Start: time.Unix(0, 1_700_000_000_000_000_000)}}}}
	got, err := DecodeAnswer(OpAcquire, AppendAnswer(nil, &a))
	if err != nil || !got.Decision.Status.Spend.Start.Equal(a.Decision.Status.Spend.Start) {
		t.Fatalf("answer with spend: %+v %v", got, err)
	}
	got.Decision.Status.Spend.Start = a.Decision.Status.Spend.Start
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("answer with spend: %+v, want %+v", got, a)
	}
	// A build that knows only the overdraft skips the spend: the op
	// whose State is its own (a slice's grant) reads it as that State.
	old := a
	old.Decision.Status.Spend = limiter.SpendStatus{}
	withSpend, without := AppendAnswer(nil, &a), AppendAnswer(nil, &old)
	if !bytes.HasPrefix(withSpend, without[:len(without)-8]) {
		t.Fatal("the spend changed the bytes before the State")
	}
	if b, err := DecodeAnswer(OpAllot, withSpend); err != nil || b.Decision.Status.Spend.Limit != 0 || len(b.State) == 0 {
		t.Fatalf("a grant's answer: %+v %v", b, err)
	}
}

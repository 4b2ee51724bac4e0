package peer

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tokenring/tokenring/limiter"
)

func TestRunRoundTrip(t *testing.T) {
	lim := &limiter.Limits{Requests: 7}
	calls := []Call{
		{Op: OpAcquire, Key: "t:acme", Req: limiter.Request{PromptTokens: 12, MaxTokens: 30}, Limits: lim},
		{Op: OpAcquire, Key: "g:team", Req: limiter.Request{Reserve: 42}},
		{Op: OpSettle, Key: "p:gpt-4o", Lease: 9, Usage: limiter.Usage{PromptTokens: 3, CompletionTokens: 4}},
	}
	got, err := DecodeRun(AppendRun(nil, calls))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, calls) {
		t.Fatalf("decoded %+v, want %+v", got, calls)
	}
	answers := []Answer{
		{Decision: limiter.Decision{Allowed: true, Lease: 5, Reserved: 42}, Owner: "n2"},
		{Decision: limiter.Decision{Reason: limiter.Tokens, Status: limiter.Status{Tokens: limiter.DimStatus{Limit: 100, Overdraft: 250}}}, Owner: "n2"},
	}
	for _, failed := range []string{"", "partition 3: in transfer"} {
		a, f, err := DecodeRunAnswers(AppendRunAnswers(nil, answers, failed))
		if err != nil || f != failed || !reflect.DeepEqual(a, answers) {
			t.Fatalf("answers %+v %q %v, want %+v %q", a, f, err, answers, failed)
		}
	}
}

// A run holds 1 to MaxRun calls of a chain's own ops, nothing else; a
// malformed one is an error, never a panic.
func TestRunRefusesWhatIsNotARun(t *testing.T) {
	acquire := Call{Op: OpAcquire, Key: "t:a"}
	many := make([]Call, MaxRun+1)
	for i := range many {
		many[i] = acquire
	}
	for name, state := range map[string][]byte{
		"empty":        AppendRun(nil, nil),
		"too many":     AppendRun(nil, many),
		"a nested run": AppendRun(nil, []Call{acquire, {Op: OpRun, Key: "t:a", State: AppendRun(nil, []Call{acquire})}}),
		"a transfer":   AppendRun(nil, []Call{{Op: OpTransfer}}),
		"truncated":    AppendRun(nil, []Call{acquire, acquire})[:5],
		"trailing":     append(AppendRun(nil, []Call{acquire}), 0),
	} {
		if _, err := DecodeRun(state); err == nil || !strings.Contains(err.Error(), "decode run") {
			t.Errorf("%s: %v, want a decode run error", name, err)
		}
	}
}

func FuzzDecodeRun(f *testing.F) {
	f.Add(AppendRun(nil, []Call{{Op: OpAcquire, Key: "t:a"}, {Op: OpCancel, Key: "g:b", Lease: 3}}))
	f.Add(AppendRunAnswers(nil, []Answer{{Owner: "n1"}}, "x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if calls, err := DecodeRun(b); err == nil {
			again, err := DecodeRun(AppendRun(nil, calls))
			if err != nil || !reflect.DeepEqual(again, calls) {
				t.Fatalf("re-encoded run decodes to %+v, %v; want %+v", again, err, calls)
			}
		}
		if answers, failed, err := DecodeRunAnswers(b); err == nil {
			a, f, err := DecodeRunAnswers(AppendRunAnswers(nil, answers, failed))
			if err != nil || f != failed || !reflect.DeepEqual(a, answers) {
				t.Fatalf("re-encoded answers decode to %+v %q %v", a, f, err)
			}
		}
	})
}

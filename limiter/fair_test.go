package limiter

import (
	"math"
	"testing"
	"time"
)

// fairConverged is when the shares of fairRun have converged: one window
// after its flows began.
const fairConverged = 2 * time.Minute

// fairPool is a pool of 60,000 tokens a minute shared fairly.
var fairPool = Limits{Tokens: 60_000, Window: time.Minute, LeaseTTL: time.Minute, Fair: true}

// fairRun drives a fair pool for dur in steps of 5 ms: at each step one
// request of 100 tokens from the next of flows (round robin; light, if
// set, asks once every lightEvery instead), each waiting wait (0: none);
// admissions are settled at once with their 100 tokens. It returns the
// tokens admitted to each flow from measureFrom on, how many requests the
// light flow asked and got once the shares converged (fairConverged), and
// the longest time between two admissions of any heavy flow after
// measureFrom.
func fairRun(t *testing.T, flows map[string]int64, order []string, wait time.Duration, light string, lightEvery, dur, measureFrom time.Duration) (got map[string]int64, lightAsked, lightGot int, longestGap time.Duration) {
	t.Helper()
	b := NewBudget(fairPool, &Policy{QueueLen: 10_000}, t0)
	got = make(map[string]int64)
	type asked struct {
		flow string
		at   time.Duration
	}
	ticketOf := make(map[uint64]asked)
	last := make(map[string]time.Duration)
	admitted := func(at, askedAt time.Duration, flow string, d Decision) {
		b.Settle(t0.Add(at), d.Lease, Usage{PromptTokens: 100})
		if flow == light && askedAt >= fairConverged {
			lightGot++
		}
		if at >= measureFrom {
			got[flow] += 100
			if flow != light {
				longestGap = max(longestGap, at-max(last[flow], measureFrom))
			}
		}
		last[flow] = at
	}
	i := 0
	for at := time.Duration(0); at < dur; at += 5 * time.Millisecond {
		for _, g := range b.Wake(t0.Add(at), nil) {
			if a := ticketOf[g.Ticket]; g.Decision.Allowed {
				admitted(at, a.at, a.flow, g.Decision)
			}
		}
		flow := order[i%len(order)]
		i++
		if light != "" && at%lightEvery == 0 {
			flow = light
			if at >= fairConverged {
				lightAsked++
			}
		}
		w := wait
		if flow == light {
			w = 10 * time.Second
		}
		d := b.Acquire(t0.Add(at), Request{Reserve: 100, Flow: flow, Weight: flows[flow], Wait: w})
		switch {
		case d.Allowed:
			admitted(at, at, flow, d)
		case d.Queued:
			ticketOf[d.Ticket] = asked{flow, at}
		case d.Reason != FairShare && d.Reason != Tokens:
			t.Fatalf("%s refused for %s", flow, d.Reason)
		}
		if st := b.Status(t0.Add(at)); st.Tokens.Overdraft != 0 {
			t.Fatalf("the pool past its limit: %+v", st.Tokens)
		}
	}
	return got, lightAsked, lightGot, longestGap
}

// within reports whether got is within 5% of want.
func within(got, want int64) bool { return math.Abs(float64(got-want)) <= 0.05*float64(want) }

// TestFairSharesByWeight: three flows of weights 1, 2 and 3, each asking
// far more than the pool admits, get 1/6, 2/6 and 3/6 of it over a whole
// window once contended (within 5%), immediate or waiting; a fourth,
// light flow that wants less than its share gets everything it asks once
// the shares have converged (in the first window of contention the
// heavy flows take what frees before anyone's demand is known).
func TestFairSharesByWeight(t *testing.T) {
	weights := map[string]int64{"w1": 1, "w2": 2, "w3": 3, "light": 1}
	order := []string{"w1", "w2", "w3"}
	for _, c := range []struct {
		name  string
		wait  time.Duration
		light string
	}{{"immediate", 0, ""}, {"waiting", 2 * time.Second, ""}, {"immediate with a light flow", 0, "light"}, {"waiting with a light flow", 2 * time.Second, "light"}} {
		t.Run(c.name, func(t *testing.T) {
			got, asked, lightGot, gap := fairRun(t, weights, order, c.wait, c.light, 2*time.Second, 4*time.Minute, 3*time.Minute)
			heavy := got["w1"] + got["w2"] + got["w3"]
			for _, f := range order {
				if want := heavy * weights[f] / 6; !within(got[f], want) {
					t.Errorf("%s (weight %d): %d tokens in the last window, want %d ±5%% (all: %v)", f, weights[f], got[f], want, got)
				}
			}
			// The pool is used whole but for the light flow's headroom:
			// what it used, once more.
			if total := heavy + got["light"]; total > fairPool.Tokens || total < fairPool.Tokens*95/100-got["light"] {
				t.Errorf("the pool admitted %d tokens in a window of %d (the light flow %d)", total, fairPool.Tokens, got["light"])
			}
			if c.light != "" && (lightGot != asked || asked == 0) {
				t.Errorf("the light flow got %d of %d", lightGot, asked)
			}
			if c.wait > 0 && gap > 5*time.Second {
				t.Errorf("a waiting flow went %s without an admission", gap)
			}
		})
	}
}

// TestFairShareLoneFlow: a flow alone on a fair pool takes all of it,
// exactly as on a pool that is not fair.
func TestFairShareLoneFlow(t *testing.T) {
	got, _, _, _ := fairRun(t, map[string]int64{"solo": 1}, []string{"solo"}, 0, "", 0, 2*time.Minute, time.Minute)
	if got["solo"] != fairPool.Tokens {
		t.Fatalf("alone: %d tokens in a window, want all %d", got["solo"], fairPool.Tokens)
	}
}

// TestFairShareUncontended: flows that together want less than the pool
// are never refused, whatever their weights.
func TestFairShareUncontended(t *testing.T) {
	b := NewBudget(fairPool, nil, t0)
	for i := range 500 { // 50,000 of 60,000 tokens in a window
		flow := []string{"a", "b", "c"}[i%3]
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		if d := b.Acquire(at, Request{Reserve: 100, Flow: flow, Weight: int64(1 + i%3*10)}); !d.Allowed {
			t.Fatalf("request %d of %s refused for %s", i, flow, d.Reason)
		}
	}
	if b.FairContended(t0.Add(50 * time.Second)) {
		t.Fatal("contended without a refusal")
	}
}

// TestFairFlowsBounded: past MaxFlows flows a new flow is served first
// come, first served; idle flows are forgotten.
func TestFairFlowsBounded(t *testing.T) {
	b := NewBudget(Limits{Requests: 10 * MaxFlows, Window: time.Second, Fair: true}, nil, t0)
	for i := range MaxFlows + 10 {
		if d := b.Acquire(t0, Request{Reserve: 1, Flow: string(rune('a'+i%26)) + string(rune(i))}); !d.Allowed {
			t.Fatalf("flow %d refused: %s", i, d.Reason)
		}
	}
	if n := len(b.fr.flows); n != MaxFlows {
		t.Fatalf("%d flows tracked, want %d", n, MaxFlows)
	}
	b.Acquire(t0.Add(time.Hour), Request{Reserve: 1, Flow: "late"})
	if n := len(b.fr.flows); n != 1 {
		t.Fatalf("%d flows after the others left the window, want the late one alone", n)
	}
}

// TestFairSharesReported: Shares gives every active flow's use and, once
// contended, its share by weight; the whole limit before.
func TestFairSharesReported(t *testing.T) {
	b := NewBudget(Limits{Requests: 60, Window: time.Minute, Fair: true}, nil, t0)
	for i := range 30 {
		b.Acquire(t0, Request{Reserve: 1, Flow: []string{"a", "b"}[i%2], Weight: int64(1 + i%2)})
	}
	s := b.Shares(t0)
	if len(s) != 2 || s[0].Flow != "a" || s[0].Used[0] != 15 || s[0].Share[0] != 60 || s[1].Weight != 2 || s[1].Share[1] != 0 {
		t.Fatalf("uncontended: %+v", s)
	}
	for range 40 { // b asks past the limit: refused, contended
		b.Acquire(t0, Request{Reserve: 1, Flow: "b", Weight: 2})
	}
	s = b.Shares(t0)
	if s[0].Share[0] != 20 || s[1].Share[0] != 40 || s[0].Used[0]+s[1].Used[0] != 60 {
		t.Fatalf("contended: %+v, want shares of 20 and 40", s)
	}
}

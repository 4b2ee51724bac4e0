package main

import (
	"math"
	"strings"
	"testing"
)

// inTurn gives each of ms the runs of rounds (rounds[k][i] is ms[i]'s
// decisions/s in round k; p50s likewise, in µs) as alternate does: one
// alternation, the median run kept.
func inTurn(rounds, p50s [][]float64, ms ...*measured) {
	set := &alternation{rounds: len(rounds)}
	for i, m := range ms {
		runs := make([]measured, len(rounds))
		for k := range rounds {
			runs[k] = canned(rounds[k][i], p50s[k][i], 10*p50s[k][i], int(rounds[k][i]), 0, int64(1e4*rounds[k][i]))
		}
		*m = medianRun(runs)
		m.rounds, m.set = runs, set
	}
}

// The median of odd and even counts; nothing, or a side not measured, is
// n/a.
func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
	if xs := []float64{3, 1, 2}; median(xs) != 2 || xs[0] != 3 {
		t.Error("median reordered its argument")
	}
	if !math.IsNaN(median(nil)) || !math.IsNaN(median([]float64{1, math.NaN(), 2})) {
		t.Error("median of nothing, or with a NaN, is not NaN")
	}
}

// Two measurements made in turn compare round by round: a round the host
// slowed for both cancels out, where the ratio of the median runs would
// pair a fast round of one with a slow round of the other. Measurements
// not made in turn compare their median runs.
func TestPairedRatio(t *testing.T) {
	var incr, single, other measured
	// Round 2 is slow for both; single's median run (70) is round 3's, incr's (100) round 1's.
	inTurn([][]float64{{100, 90}, {60, 54}, {101, 70}}, [][]float64{{300, 100}, {250, 90}, {400, 300}}, &incr, &single)
	if got := ratio(single.res.PerSecond, incr.res.PerSecond); math.Abs(got-0.7) > 1e-9 {
		t.Fatalf("the median runs' ratio = %v, want 0.70 (the case this test is about)", got)
	}
	if got := pairedRatio(single, incr, perSecond); math.Abs(got-0.9) > 1e-9 {
		t.Errorf("pairedRatio = %v, want 0.9 (rounds: 0.90, 0.90, 0.69)", got)
	}
	// p50: incr 300, 250, 400; single 100, 90, 300: differences -200, -160, -100.
	if got := pairedDiff(single, incr, p50); got != -160 {
		t.Errorf("pairedDiff = %v, want -160", got)
	}
	if got := medianStat(incr, p99); got != 3000 {
		t.Errorf("medianStat(p99) = %v, want 3,000 (of 3,000, 2,500, 4,000)", got)
	}
	inTurn([][]float64{{80}, {80}, {80}}, [][]float64{{1}, {1}, {1}}, &other) // another alternation
	if paired(other, incr) || pairedRatio(other, incr, perSecond) != 0.8 {
		t.Errorf("runs of two alternations paired: %v", pairedRatio(other, incr, perSecond))
	}
	lone := canned(50, 0, 0, 50, 0, 0)
	if paired(lone, incr) || paired(incr, lone) || pairedRatio(lone, incr, perSecond) != 0.5 || pairedDiff(lone, lone, perSecond) != 0 {
		t.Error("a measurement without rounds paired")
	}
	if got := medianStat(lone, perSecond); got != 50 {
		t.Errorf("medianStat without rounds = %v, want the run's own 50", got)
	}
}

// The report's ratios, the flatness spread and the proxy's added latency
// are taken round by round, and the flatness table shows each round's
// ratios.
func TestReportRounds(t *testing.T) {
	r := cannedReport()
	r.repeat = 3
	inTurn([][]float64{{100_000, 90_000}, {60_000, 54_000}, {101_000, 70_000}}, [][]float64{{1, 1}, {1, 1}, {1, 1}}, &r.incr, &r.single)
	f := r.flat
	// By median runs: 45,000, 55,000 (1.22×: a miss) and 36,000 (0.80×); by rounds: 1.10×, 0.90×.
	inTurn([][]float64{{50_000, 55_000, 45_000}, {30_000, 33_000, 27_000}, {45_000, 60_000, 36_000}},
		[][]float64{{1, 1, 1}, {1, 1, 1}, {1, 1, 1}}, &f[0].tokenring, &f[1].tokenring, &f[2].tokenring)
	var b strings.Builder
	r.write(&b)
	out := b.String()
	for _, want := range []string{
		"- meets  1 node ÷ Redis INCR ≥ 0.8×: 0.90×\n",
		"| tokenring 1 node, POST /v1/acquire | 70,000 | 1 µs | 10 µs | 0.90× |",
		"| 1,000 | 55,000 | 1.10× |",
		"| 10,000 | 36,000 | 0.90× |",
		"tokenring, each round's ratio to the first point: 1,000 requests a key 1.10× 1.10× 1.33×; 10,000 requests a key 0.90× 0.90× 0.80×\n",
		"- meets  flat within ±20%: ±10.0%\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

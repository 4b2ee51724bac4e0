package main

// Ratios and differences of alternated measurements, taken round by round.
//
// alternate runs a set of measurements in rounds: one run of each, back to
// back, then the next round. A shared host drifts between rounds (another
// tenant's load comes and goes over minutes) far more than within one, so
// the ratio of two measurements is taken in each round, between runs made
// seconds apart, and the median of those ratios kept: the drift a round
// shares cancels. Measurements that did not alternate (measure) have no
// rounds to pair, and compare their median runs.

import (
	"math"
	"slices"
)

// alternation identifies one call of alternate: the rounds of two
// measurements pair up only when both belong to it. (It is not empty:
// pointers to distinct zero-size values may compare equal.)
type alternation struct {
	rounds int // the runs each of its measurements made
}

// paired reports whether a and b ran in turn, round by round.
func paired(a, b measured) bool {
	return a.set != nil && a.set == b.set && len(a.rounds) == len(b.rounds) && len(a.rounds) > 0
}

// pairedRatio is stat(a) ÷ stat(b): the median of the rounds' own ratios
// when a and b alternated, else the ratio of their median runs' stats.
func pairedRatio(a, b measured, stat func(measured) float64) float64 {
	if !paired(a, b) {
		return ratio(stat(a), stat(b))
	}
	return median(roundRatios(a, b, stat))
}

// roundRatios is stat(a) ÷ stat(b) in each round, in round order; a and b
// alternated.
func roundRatios(a, b measured, stat func(measured) float64) []float64 {
	rs := make([]float64, len(a.rounds))
	for k := range rs {
		rs[k] = ratio(stat(a.rounds[k]), stat(b.rounds[k]))
	}
	return rs
}

// pairedDiff is stat(a) − stat(b): the median of the rounds' own
// differences when a and b alternated, else the difference of their median
// runs' stats.
func pairedDiff(a, b measured, stat func(measured) float64) float64 {
	if !paired(a, b) {
		return stat(a) - stat(b)
	}
	ds := make([]float64, len(a.rounds))
	for k := range ds {
		ds[k] = stat(a.rounds[k]) - stat(b.rounds[k])
	}
	return median(ds)
}

// medianStat is the median over m's rounds of stat (a p99 is then the
// median of the rounds' p99s, not the p99 of the run with the median
// decisions/s), or stat of m itself when it has no rounds.
func medianStat(m measured, stat func(measured) float64) float64 {
	if len(m.rounds) == 0 {
		return stat(m)
	}
	vs := make([]float64, len(m.rounds))
	for k, r := range m.rounds {
		vs[k] = stat(r)
	}
	return median(vs)
}

// median is the middle of xs (the mean of the middle two of an even
// count); NaN when xs is empty or holds a NaN (a side not measured).
func median(xs []float64) float64 {
	if len(xs) == 0 || slices.ContainsFunc(xs, math.IsNaN) {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// The statistics of a run the comparison reads.
func perSecond(m measured) float64 { return m.res.PerSecond }
func p50(m measured) float64       { return m.res.P50us }
func p99(m measured) float64       { return m.res.P99us }

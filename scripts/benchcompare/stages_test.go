package main

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/tokenring/tokenring/internal/jsonwire"
)

// The tenants of the run served by net/http: each name holds a byte the
// fast path's decoder does not read as it is (so the event loop and
// ServePlain decline its acquire, and net/http serves the connection), and
// is a valid tenant all the same (UTF-8, no control character), decided
// like any other.
func TestServedNetHTTPTenantsLeaveTheFastPath(t *testing.T) {
	name := repeatPrefix(servedNetHTTPPrefix, 2) + "123"
	if n := jsonwire.PlainLen([]byte(name)); n == len(name) {
		t.Fatalf("%q is read whole by the fast path: its acquires would stay on it", name)
	}
	if !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) {
		t.Fatalf("%q is not a valid tenant name", name)
	}
}

// steady makes a run again while it lost more than -max-steal to the
// hypervisor, at most stealRetries times, keeps the least robbed when every
// try was, and counts what it did; with -max-steal 0 it runs once.
func TestSteady(t *testing.T) {
	for _, c := range []struct {
		name     string
		maxSteal float64
		steals   []float64 // each try's, in order
		tries    int       // tries made
		kept     int       // the try kept
		again    int
		over     int
	}{
		{"off", 0, []float64{0.5}, 1, 0, 0, 0},
		{"calm at once", 0.05, []float64{0.05}, 1, 0, 0, 0},
		{"calm at the second", 0.05, []float64{0.2, 0.03}, 2, 1, 1, 0},
		{"a calm try is kept, not an earlier one", 0.05, []float64{0.3, 0.06, 0.04}, 3, 2, 2, 0},
		{"never calm: the least robbed", 0.05, []float64{0.3, 0.1, 0.2, 0.15}, 1 + stealRetries, 1, stealRetries, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := options{maxSteal: c.maxSteal, reruns: &reruns{}, stderr: io.Discard}
			var tries []int
			var labels []string
			m, err := o.steady("run", func(label string, try int) (measured, error) {
				tries, labels = append(tries, try), append(labels, label)
				return measured{steal: c.steals[try], res: loadResult{Requests: try}}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := make([]int, c.tries)
			for i := range want {
				want[i] = i
			}
			if !slices.Equal(tries, want) {
				t.Errorf("tries %v, want %v", tries, want)
			}
			if m.res.Requests != c.kept || m.steal != c.steals[c.kept] {
				t.Errorf("kept try %d (%v stolen), want try %d", m.res.Requests, m.steal, c.kept)
			}
			if *o.reruns != (reruns{again: c.again, over: c.over}) {
				t.Errorf("reruns %+v, want again %d, over %d", *o.reruns, c.again, c.over)
			}
			if labels[0] != "run" || (len(labels) > 1 && labels[1] != "run, again: "+percent(c.steals[0])+" stolen") {
				t.Errorf("labels %q", labels)
			}
		})
	}
	o := options{maxSteal: 0.05, reruns: &reruns{}}
	boom := errors.New("boom")
	if _, err := o.steady("run", func(string, int) (measured, error) { return measured{}, boom }); !errors.Is(err, boom) {
		t.Fatalf("a failed run: %v, want boom", err)
	}
}

// A try after the first has tenants of its own, so that a shared
// cluster's windows hold none of an earlier try's admissions.
func TestTryPrefix(t *testing.T) {
	if got := tryPrefix("hot-r0-", 0); got != "hot-r0-" {
		t.Errorf("try 0: %q", got)
	}
	if got := tryPrefix("hot-r0-", 2); got != "hot-r0-t2-" {
		t.Errorf("try 2: %q", got)
	}
}

// alternate runs one run of each measurement a round, in turn, keeps each
// one's median run with its rounds in order, and marks the measurements
// of one call as one alternation, apart from another call's.
func TestAlternate(t *testing.T) {
	o := options{repeat: 3, reruns: &reruns{}, stderr: io.Discard}
	var order []string
	var a, b, c measured
	run := func(name string, into *measured, perSecond ...float64) alternated {
		return alternated{name, into, func(label string, k int) (measured, error) {
			order = append(order, label)
			return measured{res: loadResult{PerSecond: perSecond[k]}}, nil
		}}
	}
	if err := o.alternate([]alternated{run("a", &a, 30, 10, 20), run("b", &b, 5, 6, 4)}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a (1 of 3)", "b (1 of 3)", "a (2 of 3)", "b (2 of 3)", "a (3 of 3)", "b (3 of 3)"}; !slices.Equal(order, want) {
		t.Errorf("runs in order %q, want %q", order, want)
	}
	rounds := func(m measured) []float64 {
		var vs []float64
		for _, r := range m.rounds {
			vs = append(vs, r.res.PerSecond)
		}
		return vs
	}
	if a.res.PerSecond != 20 || b.res.PerSecond != 5 || !slices.Equal(rounds(a), []float64{30, 10, 20}) || !slices.Equal(rounds(b), []float64{5, 6, 4}) {
		t.Errorf("kept a %v rounds %v, b %v rounds %v", a.res.PerSecond, rounds(a), b.res.PerSecond, rounds(b))
	}
	if !paired(a, b) {
		t.Error("a and b ran in turn but do not pair")
	}
	if err := o.alternate([]alternated{run("c", &c, 1, 2, 3)}); err != nil {
		t.Fatal(err)
	}
	if paired(a, c) {
		t.Error("measurements of two alternations pair")
	}
}

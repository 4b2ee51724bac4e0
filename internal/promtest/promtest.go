// Package promtest reads metrics back from a Prometheus registry in tests.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sample returns the first sample of the metric name gathered from g whose
// label values, in label-name order, start with labels; nil when there is
// none. A gather error fails t.
func Sample(t testing.TB, g prometheus.Gatherer, name string, labels ...string) *dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i, lp := range m.GetLabel() {
				if i >= len(labels) || lp.GetValue() != labels[i] {
					continue metric
				}
			}
			return m
		}
	}
	return nil
}

// Counter returns the value of Sample's counter; a missing one fails t.
func Counter(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	m := Sample(t, g, name, labels...)
	if m == nil {
		t.Fatalf("no %s%v", name, labels)
	}
	return m.GetCounter().GetValue()
}

package router

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/tokenring/tokenring/internal/promtest"
	"github.com/tokenring/tokenring/internal/testclock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock shared by the node and the router.
type fakeClock = testclock.Clock

func newFakeClock() *fakeClock { return testclock.New() }

// counter returns the value of the counter name with the given label values.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	return promtest.Counter(t, reg, name, labels...)
}

// samples returns the registry's samples of metric name (none: nil).
func samples(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

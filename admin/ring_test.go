package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/ring"
)

// TestAdminRingLimitsMismatch: /admin/ring shows each member's limits_hash
// and limits_mismatch, and tokenring_limits_mismatch_members counts the
// members whose hash differs from self's (n1); a member without a hash
// (older) does not count.
func TestAdminRingLimitsMismatch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		members  []ring.Member
		mismatch bool
		count    float64
	}{
		{"all equal", []ring.Member{{Name: "n1", LimitsHash: "aaaa"}, {Name: "n2", LimitsHash: "aaaa"}, {Name: "n3"}}, false, 0},
		{"two differ", []ring.Member{{Name: "n1", LimitsHash: "aaaa"}, {Name: "n2", LimitsHash: "bbbb"}, {Name: "n3", LimitsHash: "cccc"}}, true, 2},
		{"self older", []ring.Member{{Name: "n1"}, {Name: "n2", LimitsHash: "bbbb"}}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg, err := ring.New(ring.Config{}, tc.members)
			if err != nil {
				t.Fatal(err)
			}
			c := downCluster{ring: rg}
			rec := httptest.NewRecorder()
			serve(c, nil, Config{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/ring", nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("GET /admin/ring: %d %s", rec.Code, rec.Body)
			}
			var got struct {
				Members []struct {
					Name       string `json:"name"`
					LimitsHash string `json:"limits_hash"`
				} `json:"members"`
				LimitsMismatch *bool `json:"limits_mismatch"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got.LimitsMismatch == nil || *got.LimitsMismatch != tc.mismatch {
				t.Errorf("limits_mismatch = %v, want %v (%s)", got.LimitsMismatch, tc.mismatch, rec.Body)
			}
			hashes := map[string]string{}
			for _, m := range got.Members {
				hashes[m.Name] = m.LimitsHash
			}
			for _, m := range tc.members {
				if h, ok := hashes[m.Name]; !ok || h != m.LimitsHash {
					t.Errorf("member %s limits_hash = %q, want %q", m.Name, h, m.LimitsHash)
				}
			}
			if n := gaugeValue(t, LimitsMismatchCollector(c)); n != tc.count {
				t.Errorf("tokenring_limits_mismatch_members = %v, want %v", n, tc.count)
			}
		})
	}
	// Before joining, no ring: 0.
	if n := gaugeValue(t, LimitsMismatchCollector(downCluster{})); n != 0 {
		t.Errorf("without a ring: %v", n)
	}
}

// gaugeValue gathers the one gauge c collects.
func gaugeValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gather: %v %v", mfs, err)
	}
	return mfs[0].GetMetric()[0].GetGauge().GetValue()
}

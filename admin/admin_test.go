package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/goleak"

	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/router"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// downCluster is a cluster whose every owner is unreachable.
type downCluster struct{ ring *ring.Ring }

func (downCluster) Do(context.Context, node.Call) (node.Answer, error) {
	return node.Answer{}, fmt.Errorf("peer 127.0.0.1:1: %w", node.ErrPeerDown)
}
func (c downCluster) Ring() *ring.Ring { return c.ring }
func (downCluster) Name() string       { return "n1" }

// serve is the operator's endpoints of cluster behind their guard, as the
// front door serves them, reading r's counters (nil: none).
func serve(cluster router.Cluster, r *router.Router, cfg Config) http.Handler {
	var counters router.Counters
	if r != nil {
		counters = r.Counters()
	}
	a := New(cluster, counters, cfg)
	mux := http.NewServeMux()
	a.Routes(mux)
	return a.Guard(mux)
}

func TestReadyz(t *testing.T) {
	for _, ready := range []bool{false, true} {
		rec := httptest.NewRecorder()
		serve(downCluster{}, nil, Config{Ready: func() bool { return ready }}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if want := map[bool]int{false: 503, true: 200}[ready]; rec.Code != want {
			t.Fatalf("ready=%v: /readyz %d, want %d", ready, rec.Code, want)
		}
	}
}

// GET /admin/owner needs a tenant or a pool.
func TestOwnerWithoutTenant(t *testing.T) {
	rec := httptest.NewRecorder()
	serve(downCluster{}, nil, Config{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/owner", nil))
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); rec.Code != http.StatusBadRequest || err != nil || e.Error == "" {
		t.Fatalf("GET /admin/owner: %d %s, want 400 with an error text", rec.Code, rec.Body)
	}
}

func TestSameToken(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{{"x", "x", true}, {"x", "y", false}, {"", "x", false}, {"abc", "abcd", false}, {"", "", true}} {
		if got := sameToken(c.a, c.b); got != c.want {
			t.Errorf("sameToken(%q, %q) = %v", c.a, c.b, got)
		}
	}
}

package admin

import (
	"net/http"

	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/router"
)

// memberJSON is one member in GET /admin/ring.
type memberJSON struct {
	Name       string `json:"name"`
	HTTP       string `json:"http"`
	Peer       string `json:"peer"`
	Gossip     string `json:"gossip"`
	Partitions int    `json:"partitions"`
	LimitsHash string `json:"limits_hash"` // "" for a member too old to publish it
}

// limitsMismatches counts the members of rg that publish a limits hash
// other than self's. Members without one (older) do not count, nor does
// anything when self publishes none or is not in rg.
func limitsMismatches(rg *ring.Ring, self string) int {
	var own string
	for _, m := range rg.Members() {
		if m.Name == self {
			own = m.LimitsHash
		}
	}
	if own == "" {
		return 0
	}
	n := 0
	for _, m := range rg.Members() {
		if m.LimitsHash != "" && m.LimitsHash != own {
			n++
		}
	}
	return n
}

// adminRing answers GET /admin/ring: the members, their partitions and
// limits hashes.
func (a *Server) adminRing(w http.ResponseWriter, _ *http.Request) {
	rg := a.cluster.Ring()
	if rg == nil {
		writeError(w, http.StatusServiceUnavailable, "no ring yet: the node has not joined")
		return
	}
	counts := rg.Partitions()
	members := []memberJSON{}
	for _, m := range rg.Members() {
		members = append(members, memberJSON{Name: m.Name, HTTP: m.HTTP, Peer: m.Peer, Gossip: m.Gossip,
			Partitions: counts[m.Name], LimitsHash: m.LimitsHash})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"self":            a.cluster.Name(),
		"partition_count": rg.PartitionCount(),
		"version":         rg.Version(),
		"members":         members,
		"limits_mismatch": limitsMismatches(rg, a.cluster.Name()) > 0,
	})
}

// adminOwner answers GET /admin/owner?tenant= (or ?pool=): the key's
// partition and owner.
func (a *Server) adminOwner(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	var key, name, field string
	switch {
	case q.Has("tenant"):
		field, name = "tenant", q.Get("tenant")
		key = router.TenantKey(name)
	case q.Has("pool"):
		field, name = "pool", q.Get("pool")
		key = router.PoolKey(name)
	default:
		writeError(w, http.StatusBadRequest, "give ?tenant=NAME or ?pool=NAME")
		return
	}
	if err := router.CheckName(field, name, true); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rg := a.cluster.Ring()
	if rg == nil {
		writeError(w, http.StatusServiceUnavailable, "no ring yet: the node has not joined")
		return
	}
	owner, ok := rg.Owner(key)
	if !ok {
		writeError(w, http.StatusServiceUnavailable, "the ring has no members")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{field: name, "key": key, "partition": rg.Partition(key), "owner": owner.Name})
}

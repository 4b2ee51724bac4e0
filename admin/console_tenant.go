package admin

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/router"
)

// consoleLevelJSON is one level of a searched tenant's chain (or the
// searched group): its owner's status of it.
type consoleLevelJSON struct {
	Level  string     `json:"level"` // as "refused_by" names it
	Key    string     `json:"key"`
	Owner  string     `json:"owner"`
	Used   float64    `json:"used"` // the largest fraction used of a limited dimension; above 1 overdrawn
	Limits limitsJSON `json:"limits"`
}

// consoleTenantJSON is GET /admin/tenant.
type consoleTenantJSON struct {
	Tenant string             `json:"tenant,omitempty"`
	Group  string             `json:"group,omitempty"`
	Model  string             `json:"model,omitempty"`
	Levels []consoleLevelJSON `json:"levels"`
	// Refused sums the members' counts: a tenant's from their tables
	// (router.MaxRefusedTenants per member), a group's from the refusals
	// they still keep naming it (router.RecentRefusals per member).
	Refused refusedJSON `json:"refused"`
	// Refusals are the newest refusals of the tenant (of any level), or
	// by the group, that any member keeps: at most refusalsShown, newest
	// first.
	Refusals []refusalJSON `json:"refusals"`
	// History is the window of the first level (the tenant's key, or the
	// group's) at its owner.
	History historyJSON `json:"history"`
	// Errors name the members that did not answer (their refusals are
	// missing).
	Errors []string `json:"errors"`
}

// adminTenant answers GET /admin/tenant?tenant=NAME[&model=MODEL] or
// ?group=NAME: the console's search.
func (a *Server) adminTenant(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	out := consoleTenantJSON{Tenant: q.Get("tenant"), Group: q.Get("group"), Model: q.Get("model"),
		Levels: []consoleLevelJSON{}, Refusals: []refusalJSON{}, Refused: refusedJSON{ByReason: map[string]int64{}}, Errors: []string{}}
	var levels []router.Level
	var unreachable string
	var err error
	switch {
	case out.Tenant != "" && out.Group == "":
		if err := errors.Join(router.CheckName("tenant", out.Tenant, true), router.CheckName("model", out.Model, false)); err != nil || a.cfg.Levels == nil {
			writeError(w, http.StatusBadRequest, "give ?tenant=NAME[&model=MODEL] or ?group=NAME: "+errString(err))
			return
		}
		levels, unreachable, err = a.cfg.Levels(req.Context(), out.Tenant, out.Model)
	case out.Group != "" && out.Tenant == "" && a.cfg.Group != nil:
		if err := router.CheckName("group", out.Group, true); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		var l router.Level
		var down bool
		l, down, err = a.cfg.Group(req.Context(), out.Group)
		if down {
			unreachable = router.Side{Kind: router.KeyGroup, Name: out.Group}.Label()
		}
		levels = []router.Level{l}
	default:
		writeError(w, http.StatusBadRequest, "give ?tenant=NAME[&model=MODEL] or ?group=NAME")
		return
	}
	switch {
	case errors.Is(err, node.ErrPeerDown), err == nil && unreachable != "":
		writeError(w, http.StatusServiceUnavailable, "the owner of "+unreachable+" cannot be reached")
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	for _, l := range levels {
		out.Levels = append(out.Levels, consoleLevelJSON{Level: l.Label, Key: l.Key, Owner: l.Owner, Used: usedOf(l.Status), Limits: limitsOf(l.Status)})
	}
	a.tenantRefusals(req.Context(), &out)
	if len(levels) > 0 {
		h, err := a.history(req.Context(), levels[0].Owner, levels[0].Key)
		if err != nil {
			out.Errors = append(out.Errors, levels[0].Owner+": history: "+err.Error())
		}
		out.History = h
	}
	writeJSON(w, http.StatusOK, out)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// tenantRefusals fills in out's refusals from every member.
func (a *Server) tenantRefusals(ctx context.Context, out *consoleTenantJSON) {
	q := url.Values{}
	if out.Group != "" {
		q.Set("group", out.Group)
	} else {
		q.Set("tenant", out.Tenant)
	}
	all, errs := a.gatherRefusals(ctx, q)
	out.Errors = append(out.Errors, errs...)
	for _, n := range all {
		out.Refusals = append(out.Refusals, n.Recent...)
		if out.Group != "" {
			for _, r := range n.Recent {
				out.Refused.add(refusedJSON{Refused: 1, ByReason: map[string]int64{r.Reason: 1}, LastMS: r.AtMS})
			}
			continue
		}
		for _, t := range n.Tenants {
			out.Refused.add(t)
		}
	}
	slices.SortStableFunc(out.Refusals, func(x, y refusalJSON) int {
		if c := cmp.Compare(y.AtMS, x.AtMS); c != 0 {
			return c
		}
		return strings.Compare(x.Node, y.Node)
	})
	out.Refusals = out.Refusals[:min(len(out.Refusals), refusalsShown)]
}

// tenantRowJSON is one row of /admin/tenants: a tenant's state at its
// owner (when some member holds it with something used) and its refusals
// summed over the members.
type tenantRowJSON struct {
	Tenant  string      `json:"tenant"`
	Owner   string      `json:"owner,omitempty"`
	Used    float64     `json:"used"`
	Limits  *limitsJSON `json:"limits,omitempty"`
	Refused refusedJSON `json:"refused"`
}

// tenantsPageJSON is GET /admin/tenants.
type tenantsPageJSON struct {
	Sort   string          `json:"sort"` // used: nearest their limits first; refused: most refused first
	Offset int             `json:"offset"`
	Limit  int             `json:"limit"`
	More   bool            `json:"more"` // another page follows
	Rows   []tenantRowJSON `json:"rows"`
	Errors []string        `json:"errors"` // members that did not answer
}

// adminTenants answers GET /admin/tenants?sort=used|refused&offset=&limit=:
// a page of the table of tenants. By use, each member lists the
// offset+limit+1 it holds nearest their limits (a tenant is held by one
// member), merged; by refusals, each member's whole table of refused
// tenants is summed by tenant. Either way the rows join both, and a row
// still without its status gets it from its owner (fillStatus).
func (a *Server) adminTenants(w http.ResponseWriter, req *http.Request) {
	sort, offset, limit, err := pageParams(req.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out := tenantsPageJSON{Sort: sort, Offset: offset, Limit: limit, Rows: []tenantRowJSON{}}
	held, errs := a.gatherNearest(req.Context(), offset+limit+1)
	refusals, errs2 := a.gatherRefusals(req.Context(), url.Values{})
	out.Errors = append(errs, errs2...)
	refused := map[string]*refusedJSON{}
	for _, n := range refusals {
		for _, t := range n.Tenants {
			r, ok := refused[t.Tenant]
			if !ok {
				r = &refusedJSON{Tenant: t.Tenant, ByReason: map[string]int64{}}
				refused[t.Tenant] = r
			}
			r.add(t)
		}
	}
	var rows []tenantRowJSON
	byName := map[string]int{}
	for _, t := range held {
		lim := t.Limits
		byName[t.Tenant] = len(rows)
		rows = append(rows, tenantRowJSON{Tenant: t.Tenant, Owner: t.Owner, Used: t.Used, Limits: &lim,
			Refused: refusedJSON{ByReason: map[string]int64{}}})
	}
	for name, r := range refused {
		i, ok := byName[name]
		if !ok {
			if sort == "used" {
				continue
			}
			i = len(rows)
			rows = append(rows, tenantRowJSON{Tenant: name})
		}
		rows[i].Refused = *r
		rows[i].Refused.Tenant = ""
	}
	slices.SortFunc(rows, func(x, y tenantRowJSON) int {
		if sort == "refused" { // most refused, then by name (the use of a tenant not listed is not known yet)
			if c := cmp.Compare(y.Refused.Refused, x.Refused.Refused); c != 0 {
				return c
			}
		} else if c := cmp.Compare(y.Used, x.Used); c != 0 {
			return c
		}
		return strings.Compare(x.Tenant, y.Tenant)
	})
	if sort == "refused" {
		rows = slices.DeleteFunc(rows, func(r tenantRowJSON) bool { return r.Refused.Refused == 0 })
	}
	out.More = len(rows) > offset+limit
	if offset < len(rows) {
		out.Rows = rows[offset:min(len(rows), offset+limit)]
	}
	a.fillStatus(req.Context(), out.Rows)
	writeJSON(w, http.StatusOK, out)
}

// fillStatus asks the owner of every row's tenant without a status (one
// refused, not among the nearest listed) for it: at most a page of calls.
func (a *Server) fillStatus(ctx context.Context, rows []tenantRowJSON) {
	if a.cfg.Levels == nil {
		return
	}
	for i := range rows {
		r := &rows[i]
		if r.Limits != nil {
			continue
		}
		levels, unreachable, err := a.cfg.Levels(ctx, r.Tenant, "")
		if err != nil || unreachable != "" || len(levels) == 0 {
			continue
		}
		lim := limitsOf(levels[0].Status)
		r.Owner, r.Used, r.Limits = levels[0].Owner, usedOf(levels[0].Status), &lim
	}
}

// gatherNearest is every member's k tenants nearest their limits, merged
// (each held by one member), and the members that did not answer.
func (a *Server) gatherNearest(ctx context.Context, k int) ([]tenantJSON, []string) {
	got := make(chan []tenantJSON, 64)
	var all []tenantJSON
	done := make(chan struct{})
	go func() {
		for ts := range got {
			all = append(all, ts...)
		}
		close(done)
	}()
	errs := a.fanOut(ctx, func() { got <- a.nearest(k) }, func(ctx context.Context, m ring.Member) error {
		var s statsJSON
		if err := a.memberGet(ctx, m.HTTP, "/admin/stats?n="+itoa(k), &s); err != nil {
			return err
		}
		got <- s.Tenants
		return nil
	})
	close(got)
	<-done
	return all, errs
}

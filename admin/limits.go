package admin

import (
	"errors"
	"net/http"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
)

// limitsLevel is one key of /admin/limits's answer: the limits its owner
// applies, what is left of them, how far past them it counts, and where
// they come from.
type limitsLevel struct {
	Level     string     `json:"level"` // as "refused_by" names it
	Key       string     `json:"key"`
	Owner     string     `json:"owner"`
	Source    string     `json:"source,omitempty"`
	Limits    dimsJSON   `json:"limits"`
	Remaining dimsJSON   `json:"remaining"`
	Overdraft dimsJSON   `json:"overdraft"` // limiter.DimStatus.Overdraft: 0 within a limit
	ResetMS   resetsJSON `json:"reset_ms"`
}

// dimsJSON is one number a dimension; 0 in limits is unlimited.
type dimsJSON struct {
	RPM         int64 `json:"rpm"`
	TPM         int64 `json:"tpm"`
	Concurrency int64 `json:"concurrency"`
}

// resetsJSON is how long until each dimension counts nothing, in ms.
type resetsJSON struct {
	Requests    int64 `json:"requests"`
	Tokens      int64 `json:"tokens"`
	Concurrency int64 `json:"concurrency"`
}

// adminLimits answers GET /admin/limits?tenant=NAME[&model=MODEL]: the
// chain an acquire of the tenant for the model charges, in the order it is
// reserved, each key with its owner, the limits that owner applies, what is
// left, how far past them it counts, and where they come from: the config
// entry, or "request" when the owner applies limits a request sent.
func (a *Server) adminLimits(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	tenant, model := q.Get("tenant"), q.Get("model")
	if err := router.CheckName("tenant", tenant, true); err != nil {
		writeError(w, http.StatusBadRequest, "give ?tenant=NAME[&model=MODEL]: "+err.Error())
		return
	}
	if err := router.CheckName("model", model, false); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	levels, unreachable, err := a.cfg.Levels(req.Context(), tenant, model)
	switch {
	case errors.Is(err, node.ErrPeerDown), err == nil && unreachable != "":
		writeError(w, http.StatusServiceUnavailable, "the owner of "+unreachable+" cannot be reached")
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	out := make([]limitsLevel, 0, len(levels))
	for _, l := range levels {
		st := l.Status
		lv := limitsLevel{Level: l.Label, Key: l.Key, Owner: l.Owner,
			Limits:    dimsJSON{st.Requests.Limit, st.Tokens.Limit, st.Concurrency.Limit},
			Remaining: dimsJSON{st.Requests.Remaining, st.Tokens.Remaining, st.Concurrency.Remaining},
			Overdraft: dimsJSON{st.Requests.Overdraft, st.Tokens.Overdraft, st.Concurrency.Overdraft},
			ResetMS:   resetsJSON{ms(st.Requests), ms(st.Tokens), ms(st.Concurrency)}}
		if a.cfg.Source != nil {
			lv.Source = a.cfg.Source(l.Key)
		}
		if a.cfg.Limits != nil {
			if f := a.cfg.Limits(l.Key); f.Requests != st.Requests.Limit || f.Tokens != st.Tokens.Limit || f.Concurrency != st.Concurrency.Limit {
				lv.Source = "request"
			}
		}
		out = append(out, lv)
	}
	writeJSON(w, http.StatusOK, map[string]any{"tenant": tenant, "model": model, "levels": out})
}

// ms is a dimension's reset in milliseconds.
func ms(d limiter.DimStatus) int64 { return d.Reset.Milliseconds() }

package router

import (
	"fmt"

	"github.com/tokenring/tokenring/limiter"
)

// An acquire's price: what its model costs, for the keys with a spend
// limit (a budget) to reserve and settle (limiter.Request.Price).

// UnpricedError is Admit's error for an acquire whose model has no price
// (Config.Price) while a key it would charge has a budget: the budget
// could not count it. Nothing was admitted; the front ends answer 400.
type UnpricedError struct {
	Model string
	Level string // the budgeted key's Side.Label
}

func (e *UnpricedError) Error() string {
	if e.Model == "" {
		return fmt.Sprintf("%s has a budget: the request must name its model, one with a price in prices:", e.Level)
	}
	return fmt.Sprintf("model %q has no price in prices:, and %s has a budget", e.Model, e.Level)
}

// price sets adm.Req.Price to its model's price, if it has none yet and
// the model has one. An unpriced acquire is refused (UnpricedError) if a
// key of ss has a budget; the keys are looked at only when the config has
// budgets (Config.Budgeted).
func (r *Router) price(adm *Admission, ss *sideSet) error {
	if r.cfg.Price == nil || adm.Req.Price != (limiter.Price{}) {
		return nil
	}
	if p, ok := r.cfg.Price(adm.Model); ok {
		adm.Req.Price = p
		return nil
	}
	if r.cfg.Budgeted == nil || !r.cfg.Budgeted() {
		return nil
	}
	for _, s := range ss.s[:ss.n] {
		if r.cfg.Limits(s.Key).Spend > 0 {
			return &UnpricedError{Model: adm.Model, Level: s.Label()}
		}
	}
	return nil
}

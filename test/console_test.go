package test

import (
	"context"
	"reflect"
	"strconv"
	"time"

	"github.com/chromedp/chromedp"
)

// What TestAdminUI reads of the console: each panel as the page rendered it
// (its elements' data- attributes and text) and as the JSON the console
// reads gives it, in the same Go values, so that a panel is checked by
// comparing the two.

// evaluate runs js in the page and decodes its value.
func evaluate[T any](b *console, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %.80s…: %v", js, err)
	}
	return v
}

// compare waits until the page's value of a panel equals the API's (both
// read by f, the page first); the page polls every 250 ms, so a value that
// changed between the two reads is read again. It fails after 20 s with
// both.
func (b *console) compare(what string, f func() (page, api any)) {
	b.t.Helper()
	var page, api any
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if page, api = f(); reflect.DeepEqual(page, api) {
			b.t.Logf("%s: the page shows the API's %+v", what, api)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.t.Fatalf("%s: the page shows\n%+v\nthe API says\n%+v", what, page, api)
}

// search types name into the search box as kind and submits it, and
// waits for its panel.
func (b *console) search(kind, name string) {
	b.t.Helper()
	evaluate[bool](b, `(() => { document.getElementById('kind').value = `+strconv.Quote(kind)+`;
  document.getElementById('q').value = ''; return true; })()`)
	b.run("search "+kind+" "+name,
		chromedp.SendKeys(chromedp.CSS("#q"), name),
		chromedp.Click(chromedp.CSS("#go")),
		chromedp.WaitVisible(chromedp.CSS(`#detail[data-loaded="`+kind+`:`+name+`"]`)),
	)
}

// click clicks the element sel selects.
func (b *console) click(sel string) {
	b.t.Helper()
	b.run("click "+sel, chromedp.Click(chromedp.CSS(sel)))
}

// levelView is one level of the search panel.
type levelView struct {
	Level         string   `json:"level"`
	Owner         string   `json:"owner"`
	Used          float64  `json:"used"`
	RequestsUsed  int64    `json:"requests_used"`
	RequestsLimit int64    `json:"requests_limit"`
	TokensUsed    int64    `json:"tokens_used"`
	TokensLimit   int64    `json:"tokens_limit"`
	InFlight      int64    `json:"in_flight"`
	Overdraft     int64    `json:"overdraft"`
	Text          []string `json:"text"`   // the requests and tokens cells: "used / limit"
	Budget        string   `json:"budget"` // "spent+held/limit" in USD, "" without a budget
}

type refusalView struct {
	AtMS   int64  `json:"at_ms"`
	Node   string `json:"node"`
	Level  string `json:"level"`
	Reason string `json:"reason"`
}

// panelView is the search panel of a tenant or a group.
type panelView struct {
	Levels         []levelView      `json:"levels"`
	Refused        int64            `json:"refused"`
	RefusedText    string           `json:"refused_text"`
	Reasons        map[string]int64 `json:"reasons"`
	Refusals       []refusalView    `json:"refusals"`
	WindowRequests int64            `json:"window_requests"`
	WindowBuckets  int64            `json:"window_buckets"`
}

func (b *console) tenantPanel() panelView {
	return evaluate[panelView](b, `(() => {
  const d = document.getElementById('detail'), w = document.getElementById('window');
  const levels = [...document.querySelectorAll('#levels tbody tr')].map((tr) => ({ level: tr.dataset.level, owner: tr.dataset.owner,
    used: Number(tr.dataset.used), requests_used: Number(tr.dataset.requestsUsed), requests_limit: Number(tr.dataset.requestsLimit),
    tokens_used: Number(tr.dataset.tokensUsed), tokens_limit: Number(tr.dataset.tokensLimit), in_flight: Number(tr.dataset.inflight),
    overdraft: Number(tr.dataset.overdraft), text: [tr.cells[3].textContent, tr.cells[4].textContent], budget: tr.dataset.budget || '' }));
  const reasons = {};
  document.querySelectorAll('#reasons [data-reason]').forEach((c) => { reasons[c.dataset.reason] = Number(c.dataset.count); });
  const refusals = [...document.querySelectorAll('#refusals tbody tr')].map((tr) => ({ at_ms: Number(tr.dataset.at),
    node: tr.dataset.node, level: tr.dataset.level, reason: tr.dataset.reason }));
  return { levels, refused: Number(d.dataset.refused), refused_text: document.getElementById('refused-total').textContent,
    reasons, refusals, window_requests: Number(w.dataset.requests), window_buckets: Number(w.dataset.buckets) };
})()`)
}

// memberView is a row of the members' table.
type memberView struct {
	Name       string `json:"name"`
	Down       bool   `json:"down"`
	Ready      bool   `json:"ready"`
	Mandated   bool   `json:"mandated"`
	Fenced     bool   `json:"fenced"`
	LimitsHash string `json:"limits_hash"`
	Fallbacks  int64  `json:"fallbacks"`
	Debts      int64  `json:"debts"`
	Keys       int64  `json:"keys"`
}

func (b *console) members() []memberView {
	return evaluate[[]memberView](b, `[...document.querySelectorAll('#members tbody tr')].map((tr) => ({ name: tr.dataset.member,
  down: tr.classList.contains('down'), ready: tr.dataset.ready === 'true', mandated: tr.dataset.mandated === 'true',
  fenced: tr.dataset.fenced === 'true', limits_hash: tr.dataset.limitsHash || '', fallbacks: Number(tr.dataset.fallbacks || 0),
  debts: Number(tr.dataset.debts || 0), keys: Number(tr.dataset.keys || 0) }))`)
}

// healthyWithout: every member but dead is up, ready, mandated and not
// fenced, and there are want of them; dead is down or gone.
func healthyWithout(ms []memberView, dead string, want int) bool {
	up := 0
	for _, m := range ms {
		switch {
		case m.Name == dead:
			if !m.Down {
				return false
			}
		case m.Down || !m.Ready || !m.Mandated || m.Fenced:
			return false
		default:
			up++
		}
	}
	return up == want
}

type poolTopView struct {
	Tenant     string `json:"tenant"`
	Admissions int64  `json:"admissions"`
}

type poolView struct {
	Pool  string        `json:"pool"`
	Owner string        `json:"owner"`
	Used  float64       `json:"used"`
	Top   []poolTopView `json:"top"`
}

func (b *console) pools() []poolView {
	return evaluate[[]poolView](b, `[...document.querySelectorAll('#pools tbody tr')].map((tr) => ({ pool: tr.dataset.pool,
  owner: tr.dataset.owner, used: Number(tr.dataset.used), top: [...tr.querySelectorAll('[data-tenant]')].map((s) =>
    ({ tenant: s.dataset.tenant, admissions: Number(s.dataset.admissions) })) }))`)
}

type upstreamView struct {
	Calls     int64            `json:"calls"`
	Errors    int64            `json:"errors"`
	CallsText string           `json:"calls_text"`
	Kinds     map[string]int64 `json:"kinds"`
}

func (b *console) upstream() upstreamView {
	return evaluate[upstreamView](b, `(() => {
  const u = document.getElementById('upstream'), kinds = {};
  u.querySelectorAll('[data-kind]').forEach((c) => { kinds[c.dataset.kind] = Number(c.dataset.count); });
  return { calls: Number(u.dataset.calls), errors: Number(u.dataset.errors), calls_text: document.getElementById('up-calls').textContent, kinds };
})()`)
}

type historyView struct {
	Allowed int64 `json:"allowed"`
	Refused int64 `json:"refused"`
}

func (b *console) history() historyView {
	return evaluate[historyView](b, `(() => { const h = document.getElementById('history').dataset;
  return { allowed: Number(h.allowed), refused: Number(h.refused) }; })()`)
}

type tenantRowView struct {
	Tenant  string  `json:"tenant"`
	Owner   string  `json:"owner"`
	Used    float64 `json:"used"`
	Refused int64   `json:"refused"`
	Reasons string  `json:"reasons"`
}

type tenantsView struct {
	Sort   string          `json:"sort"`
	Offset int             `json:"offset"`
	Rows   []tenantRowView `json:"rows"`
}

func (b *console) tenantsTable() tenantsView {
	return evaluate[tenantsView](b, `(() => { const t = document.getElementById('tenants');
  return { sort: t.dataset.sort, offset: Number(t.dataset.offset), rows: [...t.tBodies[0].rows].map((tr) => ({ tenant: tr.dataset.tenant,
    owner: tr.dataset.owner, used: Number(tr.dataset.used), refused: Number(tr.dataset.refused), reasons: tr.dataset.reasons })) }; })()`)
}

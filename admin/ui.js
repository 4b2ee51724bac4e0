'use strict';
// tokenring's console. Every number comes from the JSON this node serves
// under /admin (each member's gathered by this node): /admin/cluster (the
// ring, members' counters, health, history, pools, the proxy's upstream),
// /admin/tenants (a page of the tenants' table) and /admin/tenant (the
// searched tenant or group). The admin token, if any, comes from ?token=
// and is sent as "Authorization: Bearer"; ?refresh= sets the poll interval
// in ms; ?tenant= or ?group= opens a search. Every element that shows a
// number also carries it as a data- attribute, as the API gave it.
const params = new URLSearchParams(location.search);
const token = params.get('token') || '';
const refresh = Math.max(250, Number(params.get('refresh')) || 1000);
const pageSize = Math.min(100, Math.max(1, Number(params.get('n')) || 20));
const palette = ['#4e9af1', '#f28e2b', '#59a14f', '#e15759', '#b07aa1', '#76b7b2', '#edc948', '#ff9da7', '#9c755f', '#bab0ac'];
const SVG = 'http://www.w3.org/2000/svg';
const samples = new Map(); // member → its counters of the last RATE_WINDOW ms
const history = new Map(); // member → its last decision rates, for the sparkline
const state = { sort: 'used', offset: 0, more: false, kind: '', name: '' };
let ringDrawn = '';
let polls = 0;
let members = new Map(); // name → palette index, of the last /admin/cluster

function el(tag, attrs, ...kids) {
  const e = tag.startsWith('svg:') ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.setAttribute('class', v);
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}
const $ = (id) => document.getElementById(id);
const color = (i) => (i >= 0 ? palette[i % palette.length] : '#3a4258');
const num = (n) => Number(n).toLocaleString('en-US');
function rate(v) {
  if (v == null) return '–';
  return v < 10 ? v.toFixed(1) : Math.round(v).toLocaleString('en-US');
}
function swatch(i) {
  const s = el('span', { class: 'sw' });
  s.style.background = color(i);
  return s;
}
async function getJSON(path) {
  const resp = await fetch(path, { headers: token ? { Authorization: 'Bearer ' + token } : {}, cache: 'no-store', credentials: 'omit' });
  if (!resp.ok) throw new Error(path.split('?')[0] + ': ' + resp.status + ' ' + (await resp.text()).slice(0, 200));
  return resp.json();
}

function arc(p, n, r0, r1) {
  const gap = n > 60 ? 0.0035 : 0.01;
  const a0 = (2 * Math.PI * p) / n - Math.PI / 2 + gap, a1 = (2 * Math.PI * (p + 1)) / n - Math.PI / 2 - gap;
  const pt = (r, a) => (r * Math.cos(a)).toFixed(2) + ' ' + (r * Math.sin(a)).toFixed(2);
  return 'M' + pt(r1, a0) + ' A' + r1 + ' ' + r1 + ' 0 0 1 ' + pt(r1, a1) +
    ' L' + pt(r0, a1) + ' A' + r0 + ' ' + r0 + ' 0 0 0 ' + pt(r0, a0) + ' Z';
}

function drawRing(c) {
  const key = c.version + '|' + c.members.map((m) => m.name).join(',');
  if (key === ringDrawn) return;
  ringDrawn = key;
  const svg = $('ring');
  svg.replaceChildren();
  const n = c.owners.length;
  c.owners.forEach((o, p) => {
    const owner = o >= 0 ? c.members[o].name : 'nobody';
    svg.append(el('svg:path', { d: arc(p, n, 128, 188), fill: color(o), 'data-partition': p, 'data-owner': owner },
      el('svg:title', { text: 'partition ' + p + ' → ' + owner })));
  });
  svg.append(el('svg:text', { class: 'big', 'text-anchor': 'middle', y: 2, text: String(n) }));
  svg.append(el('svg:text', { class: 'small', 'text-anchor': 'middle', y: 26, text: 'partitions' }));
  svg.append(el('svg:text', { class: 'small', 'text-anchor': 'middle', y: 46,
    text: c.members.length + (c.members.length === 1 ? ' member' : ' members') }));
}

// rates turns a member's counters into per-second rates over the last
// RATE_WINDOW ms of its own clock: against the newest sample at least that
// old, or the oldest one. Null until RATE_MIN ms are covered, and the
// samples start over when the counters went back (a restart).
const RATE_WINDOW = 5000, RATE_MIN = 200;
function rates(name, s) {
  const cur = { t: s.now_ms, d: s.decisions.allowed + s.decisions.refused, f: s.calls.forwarded,
    b: s.fallbacks.allowed + s.fallbacks.refused };
  let h = samples.get(name) || [];
  const last = h[h.length - 1];
  if (last && (cur.t <= last.t || cur.d < last.d || cur.f < last.f || cur.b < last.b)) h = [];
  h.push(cur);
  while (h.length > 2 && cur.t - h[1].t >= RATE_WINDOW) h.shift();
  samples.set(name, h);
  const dt = (cur.t - h[0].t) / 1000;
  if (dt * 1000 < RATE_MIN) return null;
  return { d: (cur.d - h[0].d) / dt, f: (cur.f - h[0].f) / dt, b: (cur.b - h[0].b) / dt };
}

function sparkline(name, v, i) {
  const h = history.get(name) || [];
  if (v != null) h.push(v);
  while (h.length > 60) h.shift();
  history.set(name, h);
  const svg = el('svg:svg', { class: 'spark', viewBox: '0 0 110 22', preserveAspectRatio: 'none' });
  if (h.length > 1) {
    const top = Math.max(1, ...h);
    const pts = h.map((x, k) => ((k * 110) / 59).toFixed(1) + ',' + (21 - (x / top) * 19).toFixed(1)).join(' ');
    svg.append(el('svg:polyline', { points: pts, stroke: color(i) }));
  }
  return svg;
}

const yes = (b, good) => el('td', { class: b === good ? 'ok' : 'bad', text: b ? 'yes' : 'no' });

function memberRow(m, i, c, total, selfHash) {
  const tr = el('tr', { 'data-member': m.name, 'data-partitions': m.partitions });
  const name = el('td', {}, swatch(i), m.name, m.name === c.self ? el('span', { class: 'badge', text: 'this node' }) : null);
  const share = ((100 * m.partitions) / c.partition_count).toFixed(1) + '%';
  const parts = el('td', { class: 'num' }, num(m.partitions), el('span', { class: 'pct', text: share }));
  if (!m.stats) {
    tr.setAttribute('class', 'down');
    tr.dataset.ready = 'false';
    tr.append(name, parts, el('td', { colspan: 10, class: 'err', title: m.error, text: 'unreachable: ' + m.error }));
    samples.delete(m.name);
    return tr;
  }
  const r = rates(m.name, m.stats);
  if (r) { total.d += r.d; total.f += r.f; total.b += r.b; total.n++; }
  const h = m.stats.health, fb = m.stats.fallbacks.allowed + m.stats.fallbacks.refused;
  const same = h.limits_hash === selfHash;
  Object.assign(tr.dataset, { ready: h.ready, mandated: h.mandated, fenced: h.fenced, limitsHash: h.limits_hash,
    fallbacks: fb, debts: h.debts.outstanding, debtsRecorded: h.debts.recorded, keys: m.stats.keys });
  tr.append(name, parts,
    el('td', { class: 'num', text: rate(r && r.d) }), el('td', { class: 'num', text: rate(r && r.f) }),
    el('td', { class: 'num', text: num(m.stats.keys) }), yes(h.ready, true), yes(h.mandated, true), yes(h.fenced, false),
    el('td', { class: same ? 'muted' : 'bad', title: h.limits_hash, text: (h.limits_hash || '–').slice(0, 8) + (same ? '' : ' ≠') }),
    el('td', { class: 'num' + (fb > 0 ? ' hot' : ''), text: num(fb) }),
    el('td', { class: 'num' + (h.debts.outstanding > 0 ? ' hot' : ''), title: num(h.debts.recorded) + ' recorded, ' +
      num(h.debts.repaid) + ' repaid', text: num(h.debts.outstanding) }),
    el('td', {}, sparkline(m.name, r && r.d, i)));
  return tr;
}

function drawShare(c) {
  const bars = [], keys = [];
  c.members.forEach((m, i) => {
    const b = el('span', { title: m.name + ': ' + m.partitions + ' partitions' });
    b.style.width = ((100 * m.partitions) / c.partition_count).toFixed(2) + '%';
    b.style.background = color(i);
    bars.push(b);
    keys.push(el('span', {}, swatch(i), el('b', { text: m.name }), num(m.partitions) + ' partitions' +
      (m.stats ? ' · ' + num(m.stats.keys) + ' keys' : '')));
  });
  $('share').replaceChildren(...bars);
  $('legend').replaceChildren(...keys);
}

function drawMembers(c) {
  const total = { d: 0, f: 0, b: 0, n: 0 };
  const self = c.members.find((m) => m.name === c.self);
  const selfHash = self && self.stats ? self.stats.health.limits_hash : '';
  const rows = c.members.map((m, i) => memberRow(m, i, c, total, selfHash));
  $('members').tBodies[0].replaceChildren(...rows);
  const set = (id, v, hot) => {
    $(id).querySelector('.v').textContent = total.n ? rate(v) : '–';
    $(id).classList.toggle('hot', Boolean(hot && v > 0));
  };
  set('total-decisions', total.d);
  set('total-forwards', total.f);
  set('total-fallbacks', total.b, true);
}

// bars draws columns (each a list of {v, cls, title}: the stacked parts of
// one bar) into svg, scaled to the tallest bar; column i at slot at(i) of
// slots, right-aligned by default. Labels go in captions, not in the
// stretched svg.
function bars(svg, columns, slots, at) {
  svg.replaceChildren();
  const top = Math.max(1, ...columns.map((c) => c.reduce((s, p) => s + p.v, 0)));
  const n = Math.max(slots, columns.length, 1), w = 600 / n;
  columns.forEach((parts, i) => {
    const x = (at ? at(i) : n - columns.length + i) * w;
    let y = 118;
    for (const p of parts) {
      const h = (p.v / top) * 112;
      if (h > 0) svg.append(el('svg:rect', { class: p.cls, x: (x + 0.5).toFixed(2), y: (y - h).toFixed(2),
        width: Math.max(0.5, w - 1).toFixed(2), height: h.toFixed(2) }, el('svg:title', { text: p.title || String(p.v) })));
      y -= h;
    }
  });
  svg.dataset.top = top;
  return top;
}

function drawHistory(c) {
  const pts = c.series || [];
  let allowed = 0, refused = 0;
  for (const p of pts) { allowed += p.allowed; refused += p.refused; }
  const svg = $('history');
  Object.assign(svg.dataset, { points: pts.length, allowed, refused });
  const top = bars(svg, pts.map((p) => [{ v: p.allowed, cls: 'allowed', title: p.allowed + ' allowed' },
    { v: p.refused, cls: 'refused', title: p.refused + ' refused' }]), 120);
  $('history-legend').textContent = '· ' + num(allowed) + ' allowed, ' + num(refused) + ' refused over the last ' + pts.length +
    ' s (a bar a second, up to ' + num(top) + ')';
}

function usedBar(used) {
  const pct = Math.min(100, 100 * used);
  const fill = el('span');
  fill.style.width = pct.toFixed(1) + '%';
  fill.style.background = pct >= 90 ? 'var(--bad)' : pct >= 70 ? 'var(--warn)' : 'var(--ok)';
  return el('td', {}, el('div', { class: 'bar' }, fill));
}
const left = (d) => (d.limit > 0 ? num(d.remaining) + ' / ' + num(d.limit) : '∞');
const usedOf = (d) => (d.limit > 0 ? d.limit - d.remaining + (d.overdraft || 0) : 0);
const usedText = (d) => (d.limit > 0 ? num(usedOf(d)) + ' / ' + num(d.limit) : '∞');
const slots = (d) => (d.limit > 0 ? num(d.limit - d.remaining) + ' / ' + num(d.limit) : '–');
function reasonsText(by) {
  return Object.keys(by || {}).sort().map((k) => k + ' ' + num(by[k])).join(', ');
}
function ownerCell(owner) {
  return el('td', {}, swatch(members.has(owner) ? members.get(owner) : -1), owner || '–');
}

function drawTenants(page) {
  state.more = page.more;
  const rows = page.rows.map((t) => {
    const l = t.limits;
    const tr = el('tr', { class: 'pick', 'data-tenant': t.tenant, 'data-owner': t.owner || '', 'data-used': t.used,
      'data-refused': t.refused.refused, 'data-reasons': reasonsText(t.refused.by_reason) });
    if (l) Object.assign(tr.dataset, { requestsRemaining: l.requests.remaining, tokensRemaining: l.tokens.remaining });
    tr.addEventListener('click', () => select('tenant', t.tenant));
    tr.append(el('td', { text: t.tenant }), ownerCell(t.owner), usedBar(t.used),
      el('td', { class: 'num' + (t.used >= 0.9 ? ' hot' : ''), text: l ? left(l.requests) : '–' }),
      el('td', { class: 'num', text: l ? left(l.tokens) : '–' }), el('td', { class: 'num', text: l ? slots(l.concurrency) : '–' }),
      el('td', { class: 'num' + (t.refused.refused > 0 ? ' hot' : ''), text: num(t.refused.refused) }),
      el('td', { class: 'muted', text: reasonsText(t.refused.by_reason) }));
    return tr;
  });
  $('tenants').tBodies[0].replaceChildren(...rows);
  $('no-tenants').hidden = rows.length > 0;
  $('page-info').textContent = rows.length ? page.offset + 1 + '–' + (page.offset + rows.length) : '–';
  $('prev').disabled = page.offset === 0;
  $('next').disabled = !page.more;
  $('tenants').dataset.offset = page.offset;
  $('tenants').dataset.sort = page.sort;
}

function drawPools(c) {
  const rows = c.pools.map((p) => {
    const tr = el('tr', { 'data-pool': p.pool, 'data-owner': p.owner || '', 'data-used': p.used });
    const top = el('td', {});
    for (const t of p.top) top.append(el('span', { class: 'chip', 'data-tenant': t.tenant, 'data-admissions': t.admissions }, t.tenant, el('b', { text: num(t.admissions) })));
    tr.append(el('td', { text: p.pool }), ownerCell(p.owner), usedBar(p.used),
      el('td', { class: 'num', text: p.limits ? slots(p.limits.concurrency) : '–' }), top);
    return tr;
  });
  $('pools').tBodies[0].replaceChildren(...rows);
  $('no-pools').hidden = rows.length > 0;
}

// quantile is the upper bound (ms) of the latency bucket holding the q-th
// answer, '> last bound' past them all.
function quantile(u, q) {
  const n = u.latency_ms.reduce((s, c) => s + c, 0);
  if (!n) return '–';
  let seen = 0;
  for (let i = 0; i < u.latency_ms.length; i++) {
    seen += u.latency_ms[i];
    if (seen >= q * n) return i < u.latency_bounds_ms.length ? '≤ ' + num(u.latency_bounds_ms[i]) + ' ms' : '> ' + num(u.latency_bounds_ms[i - 1]) + ' ms';
  }
  return '–';
}

function drawUpstream(c) {
  const u = c.upstream;
  const kinds = { unreachable: u.unreachable, timeouts: u.timeouts, canceled: u.canceled, '4xx': u.status_4xx, '429': u.status_429, '5xx': u.status_5xx };
  const errors = Object.values(kinds).reduce((s, v) => s + v, 0);
  $('up-calls').textContent = num(u.calls);
  $('up-errors').textContent = num(errors);
  $('up-p50').textContent = u.latency_ms ? quantile(u, 0.5) : '–';
  $('up-p99').textContent = u.latency_ms ? quantile(u, 0.99) : '–';
  Object.assign($('upstream').dataset, { calls: u.calls, errors });
  $('up-kinds').replaceChildren(...Object.entries(kinds).map(([k, v]) =>
    el('span', { class: 'chip' + (v > 0 ? ' hot' : ''), 'data-kind': k, 'data-count': v }, k, el('b', { text: num(v) }))));
  const b = u.latency_bounds_ms || [];
  bars($('latency'), (u.latency_ms || []).map((v, i) => [{ v, cls: 'lat', title: (i < b.length ? '≤ ' + b[i] : '> ' + b[b.length - 1]) + ' ms: ' + v }]), 0);
  $('latency-caption').textContent = 'answers by time to headers, buckets up to ' + b.map((x) => num(x)).join(' · ') + ' ms, then slower';
}

// budgetText is a level's budget as "$spent (+$held in flight) of $limit", or "–".
const budgetText = (b) => (b ? '$' + b.spent_usd + (b.held_usd !== '0.00' ? ' (+$' + b.held_usd + ')' : '') + ' of $' + b.limit_usd : '–');

function drawDetail(t) {
  const d = $('detail');
  d.hidden = false;
  $('detail-error').hidden = true;
  Object.assign(d.dataset, { kind: state.kind, name: state.name, refused: t.refused.refused, loaded: state.kind + ':' + state.name });
  $('levels').tBodies[0].replaceChildren(...t.levels.map((l) => {
    const s = l.limits;
    const tr = el('tr', { 'data-level': l.level, 'data-owner': l.owner, 'data-used': l.used,
      'data-requests-used': usedOf(s.requests), 'data-requests-limit': s.requests.limit, 'data-tokens-used': usedOf(s.tokens),
      'data-tokens-limit': s.tokens.limit, 'data-inflight': s.concurrency.limit > 0 ? s.concurrency.limit - s.concurrency.remaining : 0,
      'data-overdraft': s.tokens.overdraft || 0, 'data-budget': s.budget ? s.budget.spent_usd + '+' + s.budget.held_usd + '/' + s.budget.limit_usd : '' });
    tr.append(el('td', { text: l.level }), ownerCell(l.owner), usedBar(l.used), el('td', { class: 'num', text: usedText(s.requests) }),
      el('td', { class: 'num', text: usedText(s.tokens) }), el('td', { class: 'num', text: slots(s.concurrency) }),
      el('td', { class: 'num' + (s.tokens.overdraft > 0 ? ' hot' : ''), text: num(s.tokens.overdraft || 0) }),
      el('td', { class: 'num' + (s.budget && s.budget.remaining_usd === '0.00' ? ' hot' : ''), text: budgetText(s.budget) }));
    return tr;
  }));
  $('refused-total').textContent = num(t.refused.refused);
  const by = t.refused.by_reason || {};
  $('reasons').replaceChildren(...Object.keys(by).sort().map((k) =>
    el('span', { class: 'chip', 'data-reason': k, 'data-count': by[k] }, k, el('b', { text: num(by[k]) }))));
  $('refusals').tBodies[0].replaceChildren(...t.refusals.map((r) => el('tr', { 'data-at': r.at_ms, 'data-node': r.node,
    'data-level': r.level, 'data-reason': r.reason },
  el('td', { text: new Date(r.at_ms).toLocaleTimeString('en-GB') + '.' + String(r.at_ms % 1000).padStart(3, '0') }),
  el('td', { text: r.node }), el('td', { text: r.tenant }), el('td', { text: r.level + (r.fallback ? ' (fallback)' : '') }),
  el('td', { class: 'bad', text: r.reason }), el('td', { class: 'num', text: num(r.retry_after_ms) + ' ms' }))));
  $('no-refusals').hidden = t.refusals.length > 0;
  const h = t.history;
  const reqs = h.buckets.reduce((s, b) => s + b.requests, 0);
  const toks = h.buckets.reduce((s, b) => s + b.tokens, 0);
  Object.assign($('window').dataset, { buckets: h.buckets.length, requests: reqs, tokens: toks });
  // Bars placed by time over the window (now at the right): 60 slots.
  const now = Date.now(), span = h.window_ms || 60000;
  bars($('window'), h.buckets.map((b) => [{ v: b.requests, cls: 'req', title: new Date(b.t_ms).toLocaleTimeString('en-GB') + ': ' +
    b.requests + ' requests, ' + b.tokens + ' tokens' }]), 60, (i) => Math.min(59, Math.max(0, Math.floor((60 * (h.buckets[i].t_ms - now + span)) / span))));
  $('window-owner').textContent = (h.node || '–') + (h.held ? '' : ' (not held)') + ' · the last ' + num(span / 1000) + ' s: ' +
    num(reqs) + ' requests, ' + num(toks) + ' tokens in ' + h.buckets.length + ' buckets';
}

function detailError(msg) {
  $('detail').hidden = false;
  $('detail').dataset.loaded = '';
  $('detail-error').hidden = false;
  $('detail-error').textContent = msg;
}

function select(kind, name) {
  state.kind = kind;
  state.name = name.trim();
  $('kind').value = kind;
  $('q').value = state.name;
  pollNow();
}

function render(c) {
  members = new Map(c.members.map((m, i) => [m.name, i]));
  drawRing(c);
  drawMembers(c);
  drawShare(c);
  drawHistory(c);
  drawPools(c);
  drawUpstream(c);
  const up = c.members.filter((m) => m.stats).length;
  $('summary').replaceChildren(el('b', { text: c.members.length + ' members' }), ' (' + up + ' answering) · ',
    el('b', { text: c.partition_count + ' partitions' }), ' · ring ' + c.version.slice(0, 12) + ' · served by ',
    el('b', { text: c.self }));
  document.body.dataset.members = String(c.members.length);
}

function status(ok, text) {
  $('status').className = 'status ' + (ok ? 'live' : 'error');
  $('status-text').textContent = text;
}

let timer = null, running = false, again = false;
async function poll() {
  if (running) { again = true; return; }
  running = true;
  clearTimeout(timer);
  try {
    const [c, page] = await Promise.all([getJSON('/admin/cluster?n=0'),
      getJSON('/admin/tenants?sort=' + state.sort + '&offset=' + state.offset + '&limit=' + pageSize)]);
    render(c);
    drawTenants(page);
    if (state.name) {
      const q = state.kind + '=' + encodeURIComponent(state.name);
      try { drawDetail(await getJSON('/admin/tenant?' + q)); } catch (e) { detailError(String(e.message || e)); }
    }
    polls++;
    document.body.dataset.polls = String(polls);
    document.body.dataset.ready = '1';
    status(true, 'live · ' + new Date().toLocaleTimeString('en-GB'));
  } catch (e) {
    status(false, String(e.message || e));
  }
  running = false;
  if (again) { again = false; poll(); return; }
  timer = setTimeout(poll, refresh);
}
function pollNow() { poll(); }

$('search').addEventListener('submit', (e) => { e.preventDefault(); select($('kind').value, $('q').value); });
$('sort-used').addEventListener('click', () => { state.sort = 'used'; state.offset = 0; tabs(); pollNow(); });
$('sort-refused').addEventListener('click', () => { state.sort = 'refused'; state.offset = 0; tabs(); pollNow(); });
$('prev').addEventListener('click', () => { state.offset = Math.max(0, state.offset - pageSize); pollNow(); });
$('next').addEventListener('click', () => { if (state.more) { state.offset += pageSize; pollNow(); } });
function tabs() {
  $('sort-used').classList.toggle('on', state.sort === 'used');
  $('sort-refused').classList.toggle('on', state.sort === 'refused');
}
$('footer').textContent = 'Refreshes every ' + refresh + ' ms (?refresh=ms). Rates are computed here from successive counters, over the last ' +
  RATE_WINDOW / 1000 + ' s; the history is each member\'s per-second counts, summed; refusals are those each member keeps ' +
  '(the newest 512, and 1,024 tenants\' counts, a member); a pool\'s top tenants are its admissions of the last one to two minutes.';
if (params.get('tenant')) select('tenant', params.get('tenant'));
else if (params.get('group')) select('group', params.get('group'));
else poll();

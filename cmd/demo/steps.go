package main

// The steps of the demo, each printing its exchanges and checking what it
// claims.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/router"
)

// The usage the fake upstream reports for every completion.
const fakePrompt, fakeCompletion = 12, 3

// candidates are the tenant names the demo picks from.
var candidates = []string{"acme", "globex", "initech", "umbrella", "hooli", "wonka", "stark", "wayne", "tyrell", "oscorp"}

// pickTenants chooses the tenants: hot, the first candidate whose owner
// is n4 once n4 joins n1..n3 (placement depends on member names alone, so
// the ring package predicts what the cluster will do), and other, the
// first of the rest.
func (d *demo) pickTenants() error {
	owners := func(names ...string) (*ring.Ring, error) {
		var ms []ring.Member
		for _, n := range names {
			ms = append(ms, ring.Member{Name: n})
		}
		return ring.New(ring.Config{}, ms)
	}
	r3, err := owners("n1", "n2", "n3")
	if err != nil {
		return err
	}
	r4, err := owners("n1", "n2", "n3", "n4")
	if err != nil {
		return err
	}
	for _, t := range candidates {
		now, _ := r3.Owner(router.TenantKey(t))
		next, _ := r4.Owner(router.TenantKey(t))
		switch {
		case d.hot == "" && next.Name == "n4":
			d.hot, d.from = t, now.Name
		case d.other == "":
			d.other = t
		}
	}
	return check(d.hot != "" && d.other != "", "no candidate tenant moves to n4")
}

// start: fakellm, then n1, then n2 and n3 joining n1.
func (d *demo) start() error {
	d.title("Start: a fake LLM upstream and three tokenringd nodes on free loopback ports")
	t0 := time.Now()
	fake, err := startFake(d.ctx, d.binary("fakellm"),
		"-prompt-tokens", strconv.Itoa(fakePrompt), "-completion-tokens", strconv.Itoa(fakeCompletion))
	if fake != nil {
		d.fake, d.procs = fake, append(d.procs, fake)
	}
	if err != nil {
		return err
	}
	d.say("fakellm  pid %-7d http://%s/v1  (OpenAI and Anthropic shapes; reports usage %d prompt + %d completion tokens)",
		fake.cmd.Process.Pid, fake.http, fakePrompt, fakeCompletion)
	if err := d.pickTenants(); err != nil {
		return err
	}
	if d.cfg, err = writeConfig(d.dir, d.config()); err != nil {
		return err
	}
	d.say("config of every node:\n    %s", strings.ReplaceAll(strings.TrimSpace(d.config()), "\n", "\n    "))
	if err := d.startNodes(3); err != nil {
		return err
	}
	var r ringJSON
	if err := d.waitConverged(3, &r); err != nil {
		return err
	}
	d.say("ready after %.1fs: every node sees the same 3 members (ring version %s)", time.Since(t0).Seconds(), r.Version)
	return nil
}

// startNodes starts nodes until there are n: the first alone, the others
// together, joining the first; it waits until they are ready.
func (d *demo) startNodes(n int) error {
	var started []*proc
	for len(d.nodes) < n {
		name, join, how := fmt.Sprintf("n%d", len(d.nodes)+1), "", "a new cluster"
		if len(d.nodes) > 0 {
			join, how = d.nodes[0].gossip, "joins n1"
		}
		p, err := startNode(d.binary("tokenringd"), name, d.cfg, join)
		if err != nil {
			return err
		}
		d.nodes, d.procs, started = append(d.nodes, p), append(d.procs, p), append(started, p)
		d.say("%-8s pid %-7d http://%s  gossip %s  (%s)", name, p.cmd.Process.Pid, p.http, p.gossip, how)
		if len(d.nodes) == 1 { // the others join it: it must be up first
			if err := waitReady(d.ctx, p); err != nil {
				return err
			}
		}
	}
	for _, p := range started {
		if err := waitReady(d.ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// waitConverged waits until every node has a ring of n members and all
// agree on its version, and returns the first node's ring in r.
func (d *demo) waitConverged(n int, r *ringJSON) error {
	return poll(d.ctx, 20*time.Second, d.nodes[0], func() bool {
		version := ""
		for _, p := range d.nodes {
			var v ringJSON
			if d.quietJSON(p, "/admin/ring", &v) != nil || len(v.Members) != n || (version != "" && v.Version != version) {
				return false
			}
			version = v.Version
			if p == d.nodes[0] {
				*r = v
			}
		}
		return true
	})
}

// acquireBody is the decision API request of the admits.
func (d *demo) acquireBody() string {
	return `{"tenant":"` + d.hot + `","prompt_tokens":100,"max_tokens":50}`
}

// admits: three requests of the hot tenant, one to each node; the owner
// decides each.
func (d *demo) admits() error {
	d.title("Admits: tenant %s may make 3 requests a minute; any node answers, its owner decides", d.hot)
	for i, p := range d.nodes {
		a, err := d.call(p, http.MethodPost, "/v1/acquire", nil, d.acquireBody())
		if err != nil {
			return err
		}
		var res acquireJSON
		if err := decode(a, http.StatusOK, &res); err != nil {
			return err
		}
		left := int64(2 - i)
		if err := check(res.Allowed && res.Limits.Requests.Remaining == left && res.Owner == d.from,
			"admit %d: want allowed by %s with %d requests left, got %s", i+1, d.from, left, compact(a.body)); err != nil {
			return err
		}
		d.say("→ admitted by the owner %s, %d tokens reserved: %s", res.Owner, res.ReservedTokens, res.Limits.counts())
	}
	return nil
}

// fakeRequests is how many requests the fake upstream got so far.
func (d *demo) fakeRequests() int { return strings.Count(d.fake.output(), "fakellm: POST ") }

// rateLimitHeaders are the headers of a proxy answer the demo shows.
var rateLimitHeaders = []string{"Retry-After", "Retry-After-Ms", "X-Tokenring-Reason",
	"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests",
	"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens",
	"RateLimit-Policy", "RateLimit"}

// refusal: the fourth request is refused, on the decision API and on the
// proxy, and the proxy does not call the upstream.
func (d *demo) refusal() error {
	d.title("A 429: the 4th request of %s within the minute, on the decision API and through the OpenAI proxy", d.hot)
	a, err := d.call(d.nodes[1], http.MethodPost, "/v1/acquire", nil, d.acquireBody(), "Retry-After")
	if err != nil {
		return err
	}
	var res acquireJSON
	if err := decode(a, http.StatusTooManyRequests, &res); err != nil {
		return err
	}
	ra := a.header.Get("Retry-After")
	if err := check(!res.Allowed && res.Reason == "requests" && res.RetryAfterMS > 0 && ra == strconv.FormatInt((res.RetryAfterMS+999)/1000, 10),
		"want a refusal on requests with Retry-After = retry_after_ms in seconds, got Retry-After %q, %s", ra, compact(a.body)); err != nil {
		return err
	}
	d.say("→ refused on %s: retry in %d ms (Retry-After: %s s)", res.Reason, res.RetryAfterMS, ra)
	before := d.fakeRequests()
	hdr := map[string]string{"Authorization": "Bearer sk-" + d.hot}
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello again"}],"max_tokens":16}`
	a, err = d.call(d.nodes[2], http.MethodPost, "/v1/chat/completions", hdr, body, rateLimitHeaders...)
	if err != nil {
		return err
	}
	var e struct {
		Error struct{ Type, Code string } `json:"error"`
	}
	_ = json.Unmarshal(a.body, &e)
	h := a.header
	if err := check(a.status == http.StatusTooManyRequests && h.Get("Retry-After") != "" && h.Get("Retry-After-Ms") != "" &&
		h.Get("X-Ratelimit-Limit-Requests") == "3" && h.Get("X-Ratelimit-Remaining-Requests") == "0" &&
		h.Get("RateLimit") != "" && e.Error.Type == "requests" && e.Error.Code == "rate_limit_exceeded",
		"want OpenAI's 429 (rate_limit_exceeded, Retry-After, x-ratelimit-remaining-requests 0), got %d %v %s", a.status, h, compact(a.body)); err != nil {
		return err
	}
	if err := check(d.fakeRequests() == before, "the refused request reached the upstream"); err != nil {
		return err
	}
	d.say("→ 429 in OpenAI's shape (type %s, code %s), Retry-After %s s; the upstream was not called", e.Error.Type, e.Error.Code, h.Get("Retry-After"))
	return nil
}

// streamed: a streamed chat completion of the other tenant through the
// proxy, settled with the usage the upstream reported.
func (d *demo) streamed() error {
	d.title("A streamed chat completion through the proxy (tenant %s), settled with the upstream's usage", d.other)
	var before, after tenantJSON
	if err := d.getJSON(d.nodes[0], "/v1/tenants/"+d.other, &before); err != nil {
		return err
	}
	d.say("→ before: %s", before.Limits.counts())
	calls := d.fakeRequests()
	hdr := map[string]string{"Authorization": "Bearer sk-" + d.other}
	body := `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":64,` +
		`"messages":[{"role":"user","content":"Say hello"}]}`
	s, err := d.stream(d.nodes[1], hdr, body, "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Remaining-Tokens", "RateLimit")
	if err != nil {
		return err
	}
	if err := check(s.done && s.finishSeen && s.usageSeen && s.text == "Hello there!" && s.prompt == fakePrompt && s.completion == fakeCompletion,
		"want the fake's stream (\"Hello there!\", usage %d+%d, [DONE]), got %+v", fakePrompt, fakeCompletion, s); err != nil {
		return err
	}
	if err := check(d.fakeRequests() == calls+1, "want one request at the upstream, got %d", d.fakeRequests()-calls); err != nil {
		return err
	}
	admitted, _ := strconv.ParseInt(s.resp.Header.Get("X-Ratelimit-Remaining-Tokens"), 10, 64)
	reserved := before.Limits.Tokens.Remaining - admitted
	d.say("→ streamed %q; the upstream reported usage %d prompt + %d completion tokens", s.text, s.prompt, s.completion)
	if err := d.getJSON(d.nodes[2], "/v1/tenants/"+d.other, &after); err != nil {
		return err
	}
	used := s.prompt + s.completion
	b, a := before.Limits, after.Limits
	if err := check(reserved > used && a.Tokens.Remaining == b.Tokens.Remaining-used &&
		a.Requests.Remaining == b.Requests.Remaining-1 && a.Concurrency.Remaining == b.Concurrency.Remaining,
		"want %d tokens reserved then settled to %d used, one request counted and the slot freed; before %s, after %s",
		reserved, used, b.counts(), a.counts()); err != nil {
		return err
	}
	d.say("→ after: %s", a.counts())
	d.say("→ reserved %d tokens at admission (the prompt counted with tiktoken + max_tokens 64), settled to the usage: %d - %d = %d tokens left, slot freed",
		reserved, b.Tokens.Remaining, used, a.Tokens.Remaining)
	return nil
}

// ring: the cluster and the hot tenant's owner, as every node sees them.
func (d *demo) ring() error {
	d.title("The ring and an owner")
	var r ringJSON
	if err := d.getJSON(d.nodes[0], "/admin/ring", &r); err != nil {
		return err
	}
	if err := d.sayRing(r, 3); err != nil {
		return err
	}
	var o ownerJSON
	if err := d.getJSON(d.nodes[1], "/admin/owner?tenant="+d.hot, &o); err != nil {
		return err
	}
	if err := check(o.Owner == d.from, "want %s owned by %s, got %s", d.hot, d.from, o.Owner); err != nil {
		return err
	}
	if err := d.ownersAgree(d.hot, d.from); err != nil {
		return err
	}
	d.say("→ %s hashes to partition %d, owned by %s; every node agrees, and forwards %s's calls there", d.hot, o.Partition, o.Owner, d.hot)
	return nil
}

// sayRing prints and checks a ring of n members.
func (d *demo) sayRing(r ringJSON, n int) error {
	var parts []string
	sum := 0
	for _, m := range r.Members {
		parts = append(parts, fmt.Sprintf("%s %d", m.Name, m.Partitions))
		sum += m.Partitions
	}
	if err := check(len(r.Members) == n && sum == r.PartitionCount, "want %d members owning all %d partitions, got %+v", n, r.PartitionCount, r); err != nil {
		return err
	}
	d.say("→ %d members own the %d partitions: %s", n, r.PartitionCount, strings.Join(parts, ", "))
	return nil
}

// ownersAgree checks that every node names owner as the owner of tenant.
func (d *demo) ownersAgree(tenant, owner string) error {
	for _, p := range d.nodes {
		var o ownerJSON
		if err := d.quietJSON(p, "/admin/owner?tenant="+tenant, &o); err != nil {
			return err
		}
		if err := check(o.Owner == owner, "%s says %s is owned by %s, want %s", p.name, tenant, o.Owner, owner); err != nil {
			return err
		}
	}
	return nil
}

// join: n4 joins; the hot tenant's partition moves to it with its counts,
// and the other tenant keeps its counts too.
func (d *demo) join() error {
	d.title("A 4th node joins: %s's partition moves from %s to n4, with its counts", d.hot, d.from)
	var hot, other tenantJSON
	if err := d.getJSON(d.nodes[0], "/v1/tenants/"+d.hot, &hot); err != nil {
		return err
	}
	if err := d.quietJSON(d.nodes[0], "/v1/tenants/"+d.other, &other); err != nil {
		return err
	}
	d.say("→ before: %s on %s: %s", d.hot, hot.Owner, hot.Limits.counts())
	d.say("→ before: %s on %s: %s", d.other, other.Owner, other.Limits.counts())
	t0 := time.Now()
	if err := d.startNodes(4); err != nil {
		return err
	}
	var r ringJSON
	if err := d.waitConverged(4, &r); err != nil {
		return err
	}
	d.say("n4 ready (its partitions handed over) and every node sees 4 members after %.1fs", time.Since(t0).Seconds())
	if err := d.sayRing(r, 4); err != nil {
		return err
	}
	return d.afterJoin(hot, other)
}

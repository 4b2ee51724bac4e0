package test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tokenring/tokenring/test/fakeupstream"
)

// uiToken is the admin_token of the console's cluster.
const uiToken = "ui-secret"

// uiTenants is how many tenants the console's load sends for, and
// uiSends how many acquires each: their default limit admits uiAdmits.
const (
	uiTenants = 200
	uiSends   = 10
	uiAdmits  = 8
)

// uiConfig: 200 load tenants at the default limits; acme under the group
// research, whose tokens run out before acme's; payer with a budget of
// $0.001 for gpt-4.1 at its price; the pool of gpt-4o-mini,
// which pool-a and pool-b reach through the proxy. The window is long
// enough that nothing leaves it during the test.
func uiConfig(upstream string) string {
	return fmt.Sprintf(`
limits:
  default: {rpm: %d, tpm: 10000000, concurrency: 1000}
  tenants:
    acme: {rpm: 3, tpm: 1000000, concurrency: 100, parent: research}
    payer: {rpm: 100, tpm: 1000000, concurrency: 100, budget: {usd: "0.001", period: month}}
  groups:
    research: {rpm: 1000, tpm: 5000, concurrency: 100}
  window: 300s
pools:
  gpt-4o-mini: {rpm: 1000, tpm: 10000000, concurrency: 50}
prices:
  gpt-4.1: {input: 2, output: 8}
keys:
  sk-pool-a: pool-a
  sk-pool-b: pool-b
upstream:
  base_url: %s
  api_key: sk-upstream
admin_token: %s
`, uiAdmits, upstream, uiToken)
}

// chromiumBinary returns the Chromium to run headless, or why there is none.
func chromiumBinary() (string, string) {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, ""
		}
	}
	return "", "chromium is not installed (Debian: apt-get install chromium)"
}

// bearer adds the admin token to every request: the harness's readiness and
// /admin/ring polls go through it.
type bearer struct{ rt http.RoundTripper }

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+uiToken)
	return b.rt.RoundTrip(req)
}

// TestAdminUI opens the console (/admin/ui) of a real three-node cluster in
// headless Chromium (chromedp) while 200 tenants send acquires through every
// node, then checks every panel against the JSON the console reads
// (console_test.go): acme found by the search box, with its two levels, its
// three refusals (a group's tokens at one node, its own requests at two)
// and their reasons; the group research found the same way; both pages of
// the most refused tenants; the members' health; the pool's top tenants;
// the proxy's upstream calls; the history's totals. Then it SIGKILLs n3 and
// checks that the members' health shows n3 down (or gone) and the others
// ready, mandated and not fenced, as the API does. Screenshots under load,
// of the search and after the kill are kept in test/artifacts/.
func TestAdminUI(t *testing.T) {
	needFull(t)
	chromium, why := chromiumBinary()
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	up := fakeupstream.NewUpstream(t, "sk-upstream")
	up.SetReply(fakeupstream.UpstreamReply{PromptTokens: 12, CompletionTokens: 3})
	client := &http.Client{Timeout: 10 * time.Second, Transport: bearer{http.DefaultTransport}}
	c := NewClusterWith(t, daemon, 3, uiConfig(up.URL()), ClusterOptions{Place: func(p *Proc) {
		p.HTTP = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		p.Peer = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		p.Gossip = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		p.Client = client
	}})
	checkUIGuard(t, c.Procs[0])
	acmeRefusals(t, client, c.Procs)
	payerSpends(t, client, c.Procs)
	poolCalls(t, up, c.Procs)
	load := startUILoad(c.Procs)
	defer load.stop()

	b := openConsole(t, chromium, c.Procs[0].URL()+"/admin/ui?token="+uiToken+"&refresh=250")
	b.waitPolls(1)
	b.screenshot("admin-ui.png") // under load
	load.wait()
	if load.failures() != 0 {
		t.Fatalf("%d acquires of the load failed", load.failures())
	}
	api := consoleAPI{t: t, client: client, url: c.Procs[0].URL()}

	b.search("tenant", "acme")
	checkAcme(t, b.tenantPanel(), api.tenant("tenant=acme"))
	b.compare("the tenant panel", func() (any, any) { return b.tenantPanel(), api.tenant("tenant=acme") })
	b.compare("the members' health", func() (any, any) { return b.members(), api.members() })
	if page := b.members(); !healthyWithout(page, "", 3) {
		t.Fatalf("members' health before the kill: %+v, want all three ready, mandated, not fenced", page)
	}
	b.compare("the pools", func() (any, any) { return b.pools(), api.pools() })
	b.compare("the upstream", func() (any, any) { return b.upstream(), api.upstream() })
	b.compare("the history's totals", func() (any, any) { return b.history(), api.history() })
	b.compare("the history's totals and the decision counters", func() (any, any) { return b.history(), api.decisions() })
	checkPools(t, api.pools(), api.upstream())
	b.screenshot("admin-ui-tenant.png")

	b.search("tenant", "payer")
	b.compare("the budgeted tenant's panel", func() (any, any) { return b.tenantPanel(), api.tenant("tenant=payer") })
	if l := b.tenantPanel().Levels; len(l) != 1 || l[0].Budget != "0.00036+0.00044/0.001" {
		t.Fatalf("payer's levels on the page: %+v, want $0.00036 spent and $0.00044 held of $0.001", l)
	}

	b.click("#sort-refused")
	b.compare("the most refused, page 1", func() (any, any) { return b.tenantsTable(), api.tenants("refused", 0) })
	checkRefusedPage(t, api.tenants("refused", 0), 0)
	b.click("#next")
	b.compare("the most refused, page 2", func() (any, any) { return b.tenantsTable(), api.tenants("refused", 20) })
	checkRefusedPage(t, api.tenants("refused", 20), 20)

	b.search("group", "research")
	b.compare("the group panel", func() (any, any) { return b.tenantPanel(), api.tenant("group=research") })
	checkResearch(t, b.tenantPanel())

	c.Kill(c.Procs[2]) // SIGKILL n3
	b.compare("the members' health after n3's SIGKILL", func() (any, any) {
		page := b.members()
		if !healthyWithout(page, c.Procs[2].Name, 2) {
			return page, "n1 and n2 ready, mandated, not fenced; " + c.Procs[2].Name + " down or gone"
		}
		return page, api.members()
	})
	b.screenshot("admin-ui-after-kill.png")
}

// checkUIGuard: without the token the page is refused; with it in the
// query, it is served as HTML.
func checkUIGuard(t *testing.T, p *Proc) {
	t.Helper()
	for _, tc := range []struct {
		query string
		want  int
	}{{"", http.StatusUnauthorized}, {"?token=wrong", http.StatusUnauthorized}, {"?token=" + uiToken, http.StatusOK}} {
		resp, err := http.Get(p.URL() + "/admin/ui" + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("GET /admin/ui%s: %d, want %d", tc.query, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusOK && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("GET /admin/ui: Content-Type %q", resp.Header.Get("Content-Type"))
		}
	}
}

// acmeRefusals: acme's big acquire is refused by its group's tokens at n1;
// three are admitted (its rpm), one through each node; two more are
// refused by its requests, at n2 and n3.
func acmeRefusals(t *testing.T, client *http.Client, procs []*Proc) {
	t.Helper()
	send := func(p *Proc, prompt int, want int) {
		t.Helper()
		code, out, err := Post(context.Background(), client, p.URL()+"/v1/acquire",
			fmt.Sprintf(`{"tenant":"acme","prompt_tokens":%d,"max_tokens":50}`, prompt))
		if err != nil || code != want {
			t.Fatalf("acquire acme through %s: %d %v %v, want %d", p.Name, code, out, err, want)
		}
	}
	send(procs[0], 6000, http.StatusTooManyRequests)
	for _, p := range procs {
		send(p, 100, http.StatusOK)
	}
	send(procs[1], 100, http.StatusTooManyRequests)
	send(procs[2], 100, http.StatusTooManyRequests)
}

// payerSpends: payer's first request is settled ($0.00036: 100 prompt
// tokens at $2 and 20 completion tokens at $8 a million), its second is
// admitted and left in flight (holding its estimate: 100 prompt tokens and
// 1.5 × its average completion of 20, $0.00044), its third refused by the
// budget ($0.00036 + $0.00044 + $0.00044 is past $0.001).
func payerSpends(t *testing.T, client *http.Client, procs []*Proc) {
	t.Helper()
	acquire := func(p *Proc, want int) map[string]any {
		t.Helper()
		code, out, err := Post(context.Background(), client, p.URL()+"/v1/acquire",
			`{"tenant":"payer","model":"gpt-4.1","prompt_tokens":100,"max_tokens":50}`)
		if err != nil || code != want {
			t.Fatalf("acquire payer through %s: %d %v %v, want %d", p.Name, code, out, err, want)
		}
		return out
	}
	a := acquire(procs[0], http.StatusOK)
	code, out, err := Post(context.Background(), client, procs[1].URL()+"/v1/complete",
		fmt.Sprintf(`{"tenant":"payer","lease":%q,"usage":{"prompt_tokens":100,"completion_tokens":20}}`, a["lease"]))
	if err != nil || code != http.StatusOK || out["settled"] != true {
		t.Fatalf("complete payer: %d %v %v", code, out, err)
	}
	acquire(procs[1], http.StatusOK)
	if r := acquire(procs[2], http.StatusTooManyRequests); r["reason"] != "budget" || r["refused_by"] != "tenant:payer" {
		t.Fatalf("payer's third acquire: %v, want refused by its budget", r)
	}
}

// poolCalls sends chat completions for gpt-4o-mini through the proxy:
// three for pool-a, two for pool-b, the last answered 500 upstream.
func poolCalls(t *testing.T, up *fakeupstream.Upstream, procs []*Proc) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	for i, key := range []string{"sk-pool-a", "sk-pool-b", "sk-pool-a", "sk-pool-a", "sk-pool-b"} {
		want := http.StatusOK
		if i == 4 {
			up.SetReply(fakeupstream.UpstreamReply{Status: http.StatusInternalServerError})
			want = http.StatusInternalServerError
		}
		req, _ := http.NewRequest(http.MethodPost, procs[i%3].URL()+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":10}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("chat completion %d for %s: %d, want %d", i, key, resp.StatusCode, want)
		}
	}
}

// uiLoad sends uiSends acquires for each of uiTenants tenants, through
// every node, from a few workers.
type uiLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	failed int
}

func startUILoad(procs []*Proc) *uiLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &uiLoad{cancel: cancel}
	const workers = 8
	for w := range workers {
		l.wg.Go(func() {
			client := newClient()
			defer client.CloseIdleConnections()
			for i := w; i < uiTenants*uiSends; i += workers {
				tenant := fmt.Sprintf("load-%03d", i%uiTenants)
				code, _, err := Post(ctx, client, procs[i%len(procs)].URL()+"/v1/acquire",
					fmt.Sprintf(`{"tenant":%q,"prompt_tokens":%d,"max_tokens":20}`, tenant, 20+i%50))
				if ctx.Err() != nil {
					return
				}
				if err != nil || (code != http.StatusOK && code != http.StatusTooManyRequests) {
					l.mu.Lock()
					l.failed++
					l.mu.Unlock()
				}
			}
		})
	}
	return l
}

func (l *uiLoad) wait() { l.wg.Wait() }
func (l *uiLoad) stop() { l.cancel(); l.wg.Wait() }
func (l *uiLoad) failures() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// console is the console open in a headless Chromium.
type console struct {
	t     *testing.T
	ctx   context.Context
	polls int
}

// openConsole starts Chromium (chromedp: its own temporary profile, killed
// with every child when the test ends) on url, and waits for the page's
// first render.
func openConsole(t *testing.T, chromium, url string) *console {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.WindowSize(1440, 1800), chromedp.Flag("hide-scrollbars", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	b := &console{t: t, ctx: ctx}
	b.run("the first render", chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)))
	return b
}

// run runs steps within a minute, failing the test on an error.
func (b *console) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// waitPolls waits until the page has rendered n more polls than when last
// asked: it shows data fetched after the call.
func (b *console) waitPolls(n int) {
	b.t.Helper()
	b.polls += n
	eventually(b.t, 30*time.Second, fmt.Sprintf("the console's poll %d", b.polls), func() bool {
		return evaluate[int](b, `Number(document.body.dataset.polls || 0)`) >= b.polls
	})
	b.polls = evaluate[int](b, `Number(document.body.dataset.polls || 0)`)
}

// screenshot keeps the whole page as test/artifacts/name.
func (b *console) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10_000 {
		b.t.Fatalf("screenshot %s: %d bytes, %v", name, len(png), err)
	}
	if err := os.MkdirAll("artifacts", 0o755); err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join("artifacts", name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot of /admin/ui: test/%s (%d bytes)", path, len(png))
}

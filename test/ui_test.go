package test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// uiToken is the admin_token of the status page's cluster.
const uiToken = "ui-secret"

// uiConfig: "nearly" gets close to its 10 requests a minute, "halfway" to
// half of its 20; the background load's tenants take the roomy default.
const uiConfig = `
limits:
  default: {rpm: 100000, tpm: 100000000, concurrency: 100000}
  tenants:
    nearly: {rpm: 10, tpm: 100000, concurrency: 20}
    halfway: {rpm: 20, tpm: 100000, concurrency: 40}
  window: 60s
admin_token: ` + uiToken + `
`

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

// TestAdminUI opens /admin/ui of a real three-node cluster (admin_token set,
// given to the page as ?token=) in headless Chromium while clients send
// acquires through every node, and checks what the page's script rendered:
// three members whose partitions add up to 271, the 271 ring segments, and
// the tenant near its limit with the one request it has left. The page's
// screenshot is kept in test/artifacts/admin-ui.png.
func TestAdminUI(t *testing.T) {
	needFull(t)
	chromium, why := chromiumBinary()
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: bearer{http.DefaultTransport}}
	c := NewClusterWith(t, daemon, 3, uiConfig, ClusterOptions{Place: func(p *Proc) {
		p.HTTP = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		p.Peer = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		p.Gossip = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		p.Client = client
	}})
	checkUIGuard(t, c.Procs[0])
	for i := range 9 { // nearly: 9 of 10, through every node
		admitOne(t, client, c.Procs[i%3], "nearly")
	}
	for i := range 10 { // halfway: 10 of 20
		admitOne(t, client, c.Procs[i%3], "halfway")
	}
	stop := backgroundLoad(c.Procs)
	defer stop()

	url := c.Procs[0].URL() + "/admin/ui?token=" + uiToken + "&refresh=250"
	dom := runChromium(t, chromium, "--dump-dom", url)
	if err := os.MkdirAll("artifacts", 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join("artifacts", "admin-ui.html"), dom, 0o644)
	checkRendered(t, string(dom))

	shot, err := filepath.Abs(filepath.Join("artifacts", "admin-ui.png"))
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(shot)
	runChromium(t, chromium, "--screenshot="+shot, "--window-size=1280,900", url)
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10_000 {
		t.Fatalf("screenshot %s: %d bytes, %v", shot, len(png), err)
	}
	t.Logf("screenshot of /admin/ui: %s (%d bytes)", shot, len(png))
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

// admitOne sends one acquire for tenant through p; it must be admitted.
func admitOne(t *testing.T, client *http.Client, p *Proc, tenant string) {
	t.Helper()
	code, out, err := Post(context.Background(), client, p.URL()+"/v1/acquire",
		fmt.Sprintf(`{"tenant":%q,"prompt_tokens":100,"max_tokens":50}`, tenant))
	if err != nil || code != http.StatusOK || out["allowed"] != true {
		t.Fatalf("acquire %s through %s: %d %v %v", tenant, p.Name, code, out, err)
	}
}

// backgroundLoad sends acquires for a few roomy tenants through every node
// until stopped, so that the page has rates to show.
func backgroundLoad(procs []*Proc) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	client := newClient()
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				tenant := []string{"acme", "globex", "initech", "umbrella", "hooli", "wonka"}[(w+i)%6]
				_, _, _ = Post(ctx, client, procs[(w+i/6)%len(procs)].URL()+"/v1/acquire",
					fmt.Sprintf(`{"tenant":%q,"prompt_tokens":%d,"max_tokens":64}`, tenant, 50+i%200))
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
		client.CloseIdleConnections()
	}
}

// runChromium runs headless Chromium on url with args, letting the page's
// script run for 5 s of virtual time (its polls and renders), and returns
// what it printed. The browser and its children are one process group,
// killed if it outlives a minute.
func runChromium(t *testing.T, chromium string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	argv := append([]string{"--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(),
		"--virtual-time-budget=5000"}, args...)
	cmd := exec.CommandContext(ctx, chromium, argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL} // its own group, and it dies with the test
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // any child left behind
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", chromium, strings.Join(argv, " "), err, tail(stderr.String(), 4000))
	}
	return stdout.Bytes()
}

var (
	memberRow  = regexp.MustCompile(`<tr [^>]*data-member="([^"]*)"[^>]*>`)
	partsAttr  = regexp.MustCompile(`data-partitions="(\d+)"`)
	segment    = regexp.MustCompile(`<path [^>]*data-partition="\d+"`)
	nearlyRow  = regexp.MustCompile(`(?s)<tr [^>]*data-tenant="nearly"[^>]*>.*?</tr>`)
	remaining  = regexp.MustCompile(`data-requests-remaining="(\d+)"`)
	tagsInText = regexp.MustCompile(`<[^>]*>`)
	downRow    = regexp.MustCompile(`<tr [^>]*class="down"`)
)

// checkRendered checks the DOM the page's script built.
func checkRendered(t *testing.T, dom string) {
	t.Helper()
	if !strings.Contains(dom, `data-ready="1"`) {
		t.Fatalf("the page never rendered (no data-ready=\"1\"): see test/artifacts/admin-ui.html\n%s", tail(dom, 3000))
	}
	rows := memberRow.FindAllStringSubmatch(dom, -1)
	sum := 0
	for _, r := range rows {
		m := partsAttr.FindStringSubmatch(r[0])
		if m == nil {
			t.Fatalf("member row without partitions: %s", r[0])
		}
		n, _ := strconv.Atoi(m[1])
		sum += n
	}
	if len(rows) != 3 || sum != 271 {
		t.Fatalf("rendered %d members with %d partitions, want 3 with 271: %q", len(rows), sum, rows)
	}
	if n := len(segment.FindAllString(dom, -1)); n != 271 {
		t.Fatalf("ring has %d segments, want 271", n)
	}
	row := nearlyRow.FindString(dom)
	if row == "" {
		t.Fatalf("tenant nearly not listed:\n%s", tail(dom, 3000))
	}
	text := strings.Join(strings.Fields(tagsInText.ReplaceAllString(row, " ")), " ")
	if m := remaining.FindStringSubmatch(row); m == nil || m[1] != "1" || !strings.Contains(text, "1 / 10") {
		t.Fatalf("tenant nearly rendered as %q (%s), want 1 of 10 requests left", text, row)
	}
	if downRow.MatchString(dom) {
		t.Fatalf("a member rendered as unreachable:\n%s", tail(dom, 3000))
	}
}

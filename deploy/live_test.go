package deploy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// member is a tokenringd the test started with the StatefulSet's command
// line.
type member struct {
	name, http, gossip string
	token              string // the decision API's bearer token (the Secret's placeholder)
	cmd                *exec.Cmd
	done               chan struct{}
	log                *lockedBuffer
}

func (m *member) url(path string) string { return "http://" + m.http + path }

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startMember runs tokenringd as pod `name` of the StatefulSet would: the
// image's ENTRYPOINT and the container's args, $(VAR)s expanded from the
// container's env (the Secret's placeholders included), which is also the
// process's whole environment. Only what a loopback test must change is
// changed: the listeners move to free 127.0.0.1 ports, -config names a
// copy of the ConfigMap's file, -join names the first member's gossip port
// ("localhost", resolved like the headless Service's name; the first
// member joins itself, as tokenring-0 does), and -advertise is 127.0.0.1.
func startMember(t *testing.T, d deployment, configText, name string, seed *member) *member {
	t.Helper()
	return startMemberOn(t, d, configText, name, seed, "127.0.0.1")
}

// startMemberOn is startMember with the listeners bound to host (with
// their free ports): "0.0.0.0" is what the pods bind, and what protected
// mode judges. The test still reaches the member on 127.0.0.1.
func startMemberOn(t *testing.T, d deployment, configText, name string, seed *member, host string) *member {
	t.Helper()
	where := "statefulset.yaml pod " + name
	env := d.env(t, where, map[string]string{"metadata.name": name})
	var args []string
	for _, a := range d.argv[1:] {
		args = append(args, expandK8s(t, where, a, env))
	}
	c := parseCommandLine(t, where, args)
	m := &member{name: name, log: &lockedBuffer{}, done: make(chan struct{}), token: env[clientTokenEnv]}
	m.http = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	m.gossip = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	bind := func(addr string) string { return host + strings.TrimPrefix(addr, "127.0.0.1") }
	join := "localhost:" + strings.TrimPrefix(m.gossip, "127.0.0.1:")
	if seed != nil {
		join = "localhost:" + strings.TrimPrefix(seed.gossip, "127.0.0.1:")
	}
	cfgPath := filepath.Join(t.TempDir(), "tokenring.yaml")
	if err := os.WriteFile(cfgPath, []byte(configText), 0o600); err != nil {
		t.Fatal(err)
	}
	argv := []string{}
	for _, f := range c.Flags {
		v := f.Value
		switch f.Name {
		case "http":
			v = bind(m.http)
		case "gossip":
			v = bind(m.gossip)
		case "peer":
			v = bind(fmt.Sprintf("127.0.0.1:%d", freePort(t)))
		case "config":
			v = cfgPath
		case "join":
			v = join
		case "advertise":
			if !hasFlag(t, "advertise") {
				continue
			}
			v = "127.0.0.1"
		}
		argv = append(argv, "-"+f.Name+"="+v)
	}
	cmd := exec.Command(tokenringd, argv...)
	cmd.Env = []string{}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = m.log, m.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	m.cmd = cmd
	go func() {
		_ = cmd.Wait()
		close(m.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-m.done
		if t.Failed() {
			t.Logf("%s: tokenringd %s\n%s", name, strings.Join(argv, " "), m.log)
		}
	})
	return m
}

// get GETs url and returns the status and body; status 0 when it could not.
func get(url string) (int, string) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitFor polls until ok, failing after timeout or when m exits.
func waitFor(t *testing.T, m *member, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		select {
		case <-m.done:
			t.Fatalf("%s exited while waiting for %s", m.name, what)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %s within %v", m.name, what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func acquire(t *testing.T, m *member, tenant string) string {
	t.Helper()
	status, body := acquireAs(t, m, tenant, m.token)
	if status != http.StatusOK && status != http.StatusTooManyRequests {
		t.Fatalf("%s: acquire for %s: %d %s", m.name, tenant, status, body)
	}
	return body
}

// acquireAs POSTs an acquire for tenant to m with token as its bearer
// token (none when empty) and returns the status and body.
func acquireAs(t *testing.T, m *member, tenant, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, m.url("/v1/acquire"),
		strings.NewReader(fmt.Sprintf(`{"tenant":%q,"prompt_tokens":10,"max_tokens":10}`, tenant)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s: acquire: %v", m.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// exported is what a /metrics page holds: sample names and their labels.
type exported map[string]map[string]bool

var sampleLine = regexp.MustCompile(`^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+\S+`)
var sampleLabel = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="(?:[^"\\]|\\.)*"`)

func scrape(t *testing.T, url string) (exported, string) {
	t.Helper()
	status, body := get(url)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, status, body)
	}
	ex := exported{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := sampleLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if ex[m[1]] == nil {
			ex[m[1]] = map[string]bool{}
		}
		for _, l := range sampleLabel.FindAllStringSubmatch(m[2], -1) {
			ex[m[1]][l[1]] = true
		}
	}
	return ex, body
}

// TestLive runs the StatefulSet's command line as a two-member cluster:
// the probes' paths answer 200, a SIGTERM'd member fails /readyz at once and
// exits within the grace period, and, once a member was killed so that the
// metrics of fallbacks exist too (a counter with labels has no series
// before its first use), every metric of the alerts and the dashboard is
// in the survivor's /metrics.
func TestLive(t *testing.T) {
	if testing.Short() {
		t.Skip("starts tokenringd processes")
	}
	d := loadDeployment(t)
	configText := d.configText(t)
	probes := map[string]string{}
	for name, p := range map[string]*probe{"readinessProbe": d.c.ReadinessProbe, "livenessProbe": d.c.LivenessProbe, "startupProbe": d.c.StartupProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Fatalf("statefulset.yaml: no %s httpGet", name)
		}
		probes[name] = p.HTTPGet.Path
	}

	n0 := startMember(t, d, configText, "tokenring-0", nil)
	waitFor(t, n0, "200 on "+probes["readinessProbe"], 30*time.Second, func() bool {
		s, _ := get(n0.url(probes["readinessProbe"]))
		return s == http.StatusOK
	})
	n1 := startMember(t, d, configText, "tokenring-1", n0)
	waitFor(t, n1, "200 on "+probes["readinessProbe"], 30*time.Second, func() bool {
		s, _ := get(n1.url(probes["readinessProbe"]))
		return s == http.StatusOK
	})
	for _, m := range []*member{n0, n1} {
		for probe, path := range probes {
			if s, body := get(m.url(path)); s != http.StatusOK {
				t.Errorf("%s: %s GET %s: %d %s", m.name, probe, path, s, body)
			}
		}
	}
	metricsPath := loadScrapeConfig(t).ScrapeConfigs[0].MetricsPath
	waitFor(t, n0, "a ring of 2 members", 15*time.Second, func() bool {
		_, body := scrape(t, n0.url(metricsPath))
		return strings.Contains(body, "\ntokenring_members 2\n")
	})

	// Decisions on both members, forwarded and local.
	for i := range 16 {
		acquire(t, n0, "tenant-"+strconv.Itoa(i))
		acquire(t, n1, "tenant-"+strconv.Itoa(i))
	}
	// SIGTERM: /readyz fails at once, the member keeps serving for the
	// drain, hands its partitions on and exits 0 well within the grace
	// period the StatefulSet leaves it after the preStop sleep.
	grace := 30 * time.Second // Kubernetes' default
	if g := d.sts.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	grace -= d.preStop()
	start := time.Now()
	if err := n1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for {
		s, body := get(n1.url(probes["readinessProbe"]))
		if s == http.StatusServiceUnavailable {
			break
		}
		if time.Since(start) > time.Second {
			t.Fatalf("%s: %s still answers %d %s a second after SIGTERM", n1.name, probes["readinessProbe"], s, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s, _ := get(n1.url(probes["livenessProbe"])); s != http.StatusOK {
		t.Errorf("%s: %s answers %d while draining: the kubelet would kill it mid-handoff", n1.name, probes["livenessProbe"], s)
	}
	select {
	case <-n1.done:
	case <-time.After(grace):
		t.Fatalf("%s: still running %v after SIGTERM", n1.name, grace)
	}
	if code := n1.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("%s: exit code %d after SIGTERM, want 0", n1.name, code)
	}
	t.Logf("SIGTERM to exit: %v (grace period after preStop: %v)", time.Since(start).Round(time.Millisecond), grace)

	// A crashed member: its keys fall back at once, and the survivor, not
	// a majority of two, soon decides nothing itself.
	n2 := startMember(t, d, configText, "tokenring-2", n0)
	waitFor(t, n2, "200 on "+probes["readinessProbe"], 30*time.Second, func() bool {
		s, _ := get(n2.url(probes["readinessProbe"]))
		return s == http.StatusOK
	})
	waitFor(t, n0, "a ring of 2 members again", 15*time.Second, func() bool {
		_, body := scrape(t, n0.url(metricsPath))
		return strings.Contains(body, "\ntokenring_members 2\n")
	})
	if err := n2.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-n2.done
	i := 0
	waitFor(t, n0, "a fallback decision after the other member died", 20*time.Second, func() bool {
		i++
		return strings.Contains(acquire(t, n0, "tenant-"+strconv.Itoa(i%16)), `"fallback":true`)
	})

	ex, _ := scrape(t, n0.url(metricsPath))
	queries := append(ruleQueries(t), dashboardQueries(t)...)
	for _, q := range queries {
		checkExported(t, q, ex)
	}
	t.Logf("%d queries of %s and %s read only metrics a running tokenringd exports", len(queries), promRules, dashboard)
}

// checkExported: every metric q reads is exported, with the labels q
// matches and groups by.
func checkExported(t *testing.T, q query, ex exported) {
	t.Helper()
	labels := map[string]bool{}
	for _, l := range targetLabels {
		labels[l] = true
	}
	for _, name := range metricNames(q.Expr) {
		if syntheticMetrics[name] {
			continue
		}
		if ex[name] == nil {
			t.Errorf("%s: %s is not exported by tokenringd (a typo, or a metric that was renamed or removed)", q.Where, name)
			continue
		}
		for l := range ex[name] {
			labels[l] = true
		}
	}
	for metric, ls := range matcherLabels(q.Expr) {
		if syntheticMetrics[metric] || ex[metric] == nil {
			continue
		}
		for _, l := range ls {
			if !ex[metric][l] && !slices.Contains(targetLabels, l) {
				t.Errorf("%s: %s has no label %s (it has %v)", q.Where, metric, l, keys(ex[metric]))
			}
		}
	}
	for _, m := range promGrouping.FindAllStringSubmatch(q.Expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !labels[l] {
				t.Errorf("%s: groups by %s, a label none of its metrics has", q.Where, l)
			}
		}
	}
}

func keys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

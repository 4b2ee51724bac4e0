package deploy

import (
	"encoding/json"
	"maps"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const (
	promConfig = "prometheus/prometheus.yml"
	promRules  = "prometheus/tokenring.rules.yml"
	dashboard  = "grafana/tokenring.json"
)

type (
	scrapeConfig struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName        string `yaml:"job_name"`
			MetricsPath    string `yaml:"metrics_path"`
			RelabelConfigs []struct {
				SourceLabels []string `yaml:"source_labels"`
				Regex        string   `yaml:"regex"`
				Action       string   `yaml:"action"`
			} `yaml:"relabel_configs"`
		} `yaml:"scrape_configs"`
	}
	ruleFile struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Record      string            `yaml:"record"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
)

// query is a PromQL expression from a deployment file.
type query struct{ Where, Expr string }

func loadScrapeConfig(t *testing.T) scrapeConfig {
	t.Helper()
	var sc scrapeConfig
	if err := yaml.Unmarshal([]byte(readFile(t, promConfig)), &sc); err != nil {
		t.Fatalf("%s: %v", promConfig, err)
	}
	if len(sc.ScrapeConfigs) != 1 {
		t.Fatalf("%s: want one scrape config (the tokenring job), got %d", promConfig, len(sc.ScrapeConfigs))
	}
	return sc
}

func ruleQueries(t *testing.T) []query {
	t.Helper()
	var rf ruleFile
	if err := yaml.Unmarshal([]byte(readFile(t, promRules)), &rf); err != nil {
		t.Fatalf("%s: %v", promRules, err)
	}
	var qs []query
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{promRules + " " + r.Alert + r.Record, r.Expr})
		}
	}
	return qs
}

// dashboardQueries returns every "expr" of the dashboard's panels and every
// query of its template variables.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	var d any
	if err := json.Unmarshal([]byte(readFile(t, dashboard)), &d); err != nil {
		t.Fatalf("%s: %v", dashboard, err)
	}
	var qs []query
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if title, ok := v["title"].(string); ok {
				where = dashboard + " " + title
			}
			if name, ok := v["name"].(string); ok && v["type"] == "query" {
				where = dashboard + " $" + name
			}
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || (k == "query" && strings.Contains(s, "("))) {
					qs = append(qs, query{where, s})
				}
				walk(where, x)
			}
		case []any:
			for _, x := range v {
				walk(where, x)
			}
		}
	}
	walk(dashboard, d)
	return qs
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	grafanaVar   = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)
	promIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promSelector = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}`)
	promRange    = regexp.MustCompile(`\[([^\]]*)\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)
	jobMatcher   = regexp.MustCompile(`\bjob\s*=\s*"([^"]*)"`)
)

// syntheticMetrics are series Prometheus makes itself, not the target.
var syntheticMetrics = map[string]bool{"up": true}

// metricNames returns the metrics an expression reads: identifiers with a
// prefix of the metrics tokenringd exports, and any identifier followed by a
// selector.
func metricNames(expr string) []string {
	e := grafanaVar.ReplaceAllString(promString.ReplaceAllString(expr, `""`), "x")
	var names []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		id := e[loc[0]:loc[1]]
		if loc[0] > 0 && (e[loc[0]-1] == '.' || isDigit(e[loc[0]-1])) {
			continue // 1e-9, 0.5m
		}
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		prefixed := strings.HasPrefix(id, "tokenring_") || strings.HasPrefix(id, "go_") || strings.HasPrefix(id, "process_")
		if prefixed || syntheticMetrics[id] || strings.HasPrefix(rest, "{") {
			names = append(names, id)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// matcherLabels returns, by metric, the label names the expression's
// selectors match on.
func matcherLabels(expr string) map[string][]string {
	e := promString.ReplaceAllString(expr, `""`)
	out := map[string][]string{}
	for _, m := range promSelector.FindAllStringSubmatch(e, -1) {
		for _, part := range strings.Split(m[2], ",") {
			name, _, _ := strings.Cut(part, "=")
			if name = strings.TrimSpace(strings.TrimSuffix(name, "!")); name != "" {
				out[m[1]] = append(out[m[1]], name)
			}
		}
	}
	return out
}

// targetLabels are the labels the scrape config attaches to every series.
var targetLabels = []string{"job", "instance", "namespace", "pod"}

func TestPrometheusConfig(t *testing.T) {
	sc := loadScrapeConfig(t)
	job := sc.ScrapeConfigs[0]
	if job.MetricsPath != "/metrics" {
		t.Errorf("%s: metrics_path %q: tokenringd serves /metrics", promConfig, job.MetricsPath)
	}
	if !slices.Contains(sc.RuleFiles, filepath.Base(promRules)) {
		t.Errorf("%s: rule_files %v does not load %s", promConfig, sc.RuleFiles, filepath.Base(promRules))
	}
	// The relabelling keeps the StatefulSet's pods, on the http port.
	d := loadDeployment(t)
	kept := map[string]string{}
	for _, r := range job.RelabelConfigs {
		if r.Action == "keep" && len(r.SourceLabels) == 1 {
			kept[r.SourceLabels[0]] = r.Regex
		}
	}
	for k, v := range d.sts.Spec.Template.Metadata.Labels {
		meta := "__meta_kubernetes_pod_label_" + regexp.MustCompile(`[^A-Za-z0-9_]`).ReplaceAllString(k, "_")
		if re, ok := kept[meta]; ok && !regexp.MustCompile("^(?:"+re+")$").MatchString(v) {
			t.Errorf("%s: keeps %s =~ %q, but the pods have %s=%s", promConfig, meta, re, k, v)
		}
		delete(kept, meta)
	}
	portRe, ok := kept["__meta_kubernetes_pod_container_port_name"]
	if !ok {
		t.Errorf("%s: does not keep only the http container port", promConfig)
	}
	delete(kept, "__meta_kubernetes_pod_container_port_name")
	for _, p := range d.c.Ports {
		if regexp.MustCompile("^(?:"+portRe+")$").MatchString(p.Name) && p.ContainerPort != d.ports.HTTP {
			t.Errorf("%s: keeps container port %s (%d), not -http's %d", promConfig, p.Name, p.ContainerPort, d.ports.HTTP)
		}
	}
	if len(kept) > 0 {
		t.Errorf("%s: keeps on labels the pods do not have: %v", promConfig, kept)
	}
}

func TestPrometheusRules(t *testing.T) {
	var rf ruleFile
	if err := yaml.Unmarshal([]byte(readFile(t, promRules)), &rf); err != nil {
		t.Fatal(err)
	}
	job := loadScrapeConfig(t).ScrapeConfigs[0].JobName
	names := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			where := promRules + " " + r.Alert
			if r.Alert == "" || names[r.Alert] {
				t.Errorf("%s: every rule needs a unique alert name", where)
			}
			names[r.Alert] = true
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("%s: severity %q, want critical, warning or info", where, s)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary annotation", where)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", where, r.For, err)
				}
			}
			checkQuery(t, query{where, r.Expr}, job)
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s: no rules", promRules)
	}
	for _, metric := range []string{"tokenring_fallback_decisions_total", "tokenring_unreplicated", "tokenring_reset_while_holder_alive_total",
		"tokenring_members", "tokenring_fenced", "tokenring_quorum_leased", "tokenring_owner_timeouts_total"} {
		if !slices.ContainsFunc(ruleQueries(t), func(q query) bool { return slices.Contains(metricNames(q.Expr), metric) }) {
			t.Errorf("%s: no alert on %s", promRules, metric)
		}
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(promtool, "check", "rules", promRules).CombinedOutput(); err != nil {
			t.Errorf("promtool check rules: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not found: PromQL syntax checked only for brackets")
	}
}

// checkQuery checks what can be checked of a PromQL expression without a
// PromQL parser: balanced brackets, range durations, the job it selects.
func checkQuery(t *testing.T, q query, job string) {
	t.Helper()
	e := promString.ReplaceAllString(q.Expr, `""`)
	depth := map[rune]int{}
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for _, r := range e {
		switch r {
		case '(', '[', '{':
			depth[r]++
		case ')', ']', '}':
			if depth[pairs[r]]--; depth[pairs[r]] < 0 {
				t.Errorf("%s: unbalanced %c in %s", q.Where, r, q.Expr)
			}
		}
	}
	for k, n := range depth {
		if n != 0 {
			t.Errorf("%s: unbalanced %c in %s", q.Where, k, q.Expr)
		}
	}
	for _, m := range promRange.FindAllStringSubmatch(grafanaVar.ReplaceAllString(e, "5m"), -1) {
		r, _, _ := strings.Cut(m[1], ":") // subquery [5m:1m]
		if _, err := time.ParseDuration(r); err != nil {
			t.Errorf("%s: range [%s]: %v", q.Where, m[1], err)
		}
	}
	for _, m := range jobMatcher.FindAllStringSubmatch(q.Expr, -1) {
		if m[1] != job {
			t.Errorf("%s: selects job=%q, but %s scrapes job %q", q.Where, m[1], promConfig, job)
		}
	}
	if len(metricNames(q.Expr)) == 0 {
		t.Errorf("%s: reads no metric: %s", q.Where, q.Expr)
	}
}

func TestGrafanaDashboard(t *testing.T) {
	var d struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int             `json:"id"`
			Type       string          `json:"type"`
			Title      string          `json:"title"`
			Datasource json.RawMessage `json:"datasource"`
			Targets    []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readFile(t, dashboard)), &d); err != nil {
		t.Fatalf("%s: %v", dashboard, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: no uid or title", dashboard)
	}
	vars := map[string]bool{"__rate_interval": true, "__range": true, "__interval": true}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("%s: panel id %d used twice", dashboard, p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 || len(p.Datasource) == 0 {
			t.Errorf("%s: panel %q has no targets or no datasource", dashboard, p.Title)
		}
	}
	job := loadScrapeConfig(t).ScrapeConfigs[0].JobName
	for _, q := range dashboardQueries(t) {
		checkQuery(t, q, job)
		for _, v := range grafanaVar.FindAllString(q.Expr, -1) {
			if name := strings.Trim(v, "${}"); !vars[name] {
				t.Errorf("%s: uses $%s, which is not a template variable", q.Where, name)
			}
		}
	}
}

// series is a /metrics page's samples: by name, each sample's labels.
type series map[string][]map[string]string

var sampleLabelValue = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"`)

func scrapeSeries(t *testing.T, url string) series {
	t.Helper()
	_, body := scrape(t, url)
	s := series{}
	for line := range strings.Lines(body) {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range sampleLabelValue.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		s[m[1]] = append(s[m[1]], labels)
	}
	return s
}

// promEqual is a selector's label="value" matcher.
var promEqual = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"([^"]*)"`)

// TestDashboardSeriesAtStartup: a member of the shipped deployment
// exports, before any traffic, a sample of every metric the dashboard
// and the alerts read, with every label they group by and every
// label="value" they select on. A counter with labels has no series until
// its first use, so a panel over one (the fallback decisions, the refused
// decisions) would say "No data" instead of 0, and a rate over it would
// miss its first increase: those are made at zero at start.
func TestDashboardSeriesAtStartup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts tokenringd")
	}
	d := loadDeployment(t)
	m := startMember(t, d, d.configText(t), "tokenring-0", nil)
	waitFor(t, m, "200 on /readyz", 30*time.Second, func() bool {
		s, _ := get(m.url("/readyz"))
		return s == http.StatusOK
	})
	got := scrapeSeries(t, m.url(loadScrapeConfig(t).ScrapeConfigs[0].MetricsPath))
	has := func(name string, want map[string]string) bool {
		return slices.ContainsFunc(got[name], func(labels map[string]string) bool {
			for k, v := range want {
				if _, ok := labels[k]; !ok || (v != "" && labels[k] != v) {
					return false
				}
			}
			return true
		})
	}
	queries := append(dashboardQueries(t), ruleQueries(t)...)
	for _, q := range queries {
		expr := grafanaVar.ReplaceAllString(q.Expr, "x")
		names := metricNames(expr)
		grouped := map[string]string{}
		for _, g := range promGrouping.FindAllStringSubmatch(expr, -1) {
			for l := range strings.SplitSeq(g[1], ",") {
				if l = strings.TrimSpace(l); l != "" && l != "le" && !slices.Contains(targetLabels, l) {
					grouped[l] = ""
				}
			}
		}
		selected := map[string]map[string]string{}
		for _, sel := range promSelector.FindAllStringSubmatch(expr, -1) {
			for _, eq := range promEqual.FindAllStringSubmatch(sel[2], -1) {
				if !slices.Contains(targetLabels, eq[1]) {
					if selected[sel[1]] == nil {
						selected[sel[1]] = map[string]string{}
					}
					selected[sel[1]][eq[1]] = eq[2]
				}
			}
		}
		for _, name := range names {
			if syntheticMetrics[name] {
				continue
			}
			if got[name] == nil {
				t.Errorf("%s: no %s sample at startup", q.Where, name)
				continue
			}
			want := maps.Clone(selected[name])
			if want == nil {
				want = map[string]string{}
			}
			for l := range grouped {
				if has(name, map[string]string{l: ""}) {
					want[l] = ""
				}
			}
			if !has(name, want) {
				t.Errorf("%s: no %s series with %v at startup (it has %v)", q.Where, name, want, got[name])
			}
		}
		for l := range grouped {
			if !slices.ContainsFunc(names, func(n string) bool { return has(n, map[string]string{l: ""}) }) {
				t.Errorf("%s: groups by %s, which no series of %v carries at startup", q.Where, l, names)
			}
		}
	}
	t.Logf("%d queries of %s and %s have their series from startup", len(queries), dashboard, promRules)
}

package deploy

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	unitFile     = "systemd/tokenringd.service"
	unitEnvFile  = "systemd/tokenringd.env"
	unitConfig   = "systemd/tokenring.yaml"
	installedEnv = "/etc/tokenring/tokenringd.env" // where the unit's comment installs unitEnvFile
	installedCfg = "/etc/tokenring/tokenring.yaml" // and unitConfig
)

// unit is a systemd unit file: section -> key -> values, in order.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, file string) unit {
	t.Helper()
	u := unit{}
	section := ""
	var cont strings.Builder
	for n, line := range strings.Split(readFile(t, file), "\n") {
		line = strings.TrimSpace(line)
		if cont.Len() == 0 && (line == "" || line[0] == '#' || line[0] == ';') {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cont.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cont.WriteString(line)
		line = cont.String()
		cont.Reset()
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			t.Fatalf("%s:%d: want Key=Value in a section, got %q", file, n+1, line)
		}
		u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
	}
	return u
}

// get returns the last value of key in section ("" when unset).
func (u unit) get(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// systemdSeconds parses a systemd time span: "45", "45s", "1min 30s".
func systemdSeconds(t *testing.T, v string) time.Duration {
	t.Helper()
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second
	}
	var total time.Duration
	for _, part := range strings.Fields(strings.ReplaceAll(v, "min", "m")) {
		d, err := time.ParseDuration(part)
		if err != nil {
			t.Errorf("%s: time span %q: %v", unitFile, v, err)
		}
		total += d
	}
	return total
}

func TestSystemdUnit(t *testing.T) {
	u := parseUnit(t, unitFile)
	svc := u["Service"]
	if svc == nil {
		t.Fatalf("%s: no [Service]", unitFile)
	}
	argv := strings.Fields(u.get("Service", "ExecStart"))
	if len(argv) == 0 || !path.IsAbs(argv[0]) || path.Base(argv[0]) != "tokenringd" {
		t.Fatalf("%s: ExecStart %q: want /absolute/path/tokenringd flags...", unitFile, argv)
	}
	c := parseCommandLine(t, unitFile+" ExecStart", argv[1:])
	p := listenPorts(t, c)
	if img := checkDockerfile(t); p != img.Ports {
		t.Errorf("%s: ports %+v, the image's %+v: keep one set of ports (the Prometheus config and docs assume them)", unitFile, p, img.Ports)
	}
	if cfgPath, _ := c.Get(t, "config"); cfgPath != installedCfg {
		t.Errorf("%s: -config %q, want %s (where %s is installed)", unitFile, cfgPath, installedCfg, unitConfig)
	}
	if got := u.get("Service", "EnvironmentFile"); strings.TrimPrefix(got, "-") != installedEnv {
		t.Errorf("%s: EnvironmentFile %q, want %s", unitFile, got, installedEnv)
	}

	env := readEnvFile(t, unitEnvFile)
	text := readFile(t, unitConfig)
	cfg := loadConfig(t, unitConfig, text, env)
	checkEnvNames(t, unitEnvFile, env, c, configRefs(text))
	for k, v := range env {
		if !placeholder(v) {
			t.Errorf("%s: %s=%s is not a REPLACE-ME placeholder", unitEnvFile, k, v)
		}
	}
	hasFlag(t, "advertise")
	if env[envName("advertise")] == "" {
		t.Errorf("%s: no %s: a node bound to 0.0.0.0 must advertise a reachable address", unitEnvFile, envName("advertise"))
	}

	want := map[string]string{
		"KillSignal": "SIGTERM", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "", "Restart": "on-failure",
		"RestrictSUIDSGID": "yes", "LockPersonality": "yes", "MemoryDenyWriteExecute": "yes",
	}
	for k, v := range want {
		if got, ok := svc[k]; !ok || got[len(got)-1] != v {
			t.Errorf("%s: [Service] %s=%v, want %s=%s", unitFile, k, got, k, v)
		}
	}
	if u.get("Service", "DynamicUser") != "yes" {
		if user := u.get("Service", "User"); user == "" || user == "root" || user == "0" {
			t.Errorf("%s: want DynamicUser=yes or a dedicated User=", unitFile)
		}
	}
	if km := u.get("Service", "KillMode"); km == "process" || km == "none" {
		t.Errorf("%s: KillMode=%s leaves processes behind", unitFile, km)
	}
	stop := systemdSeconds(t, u.get("Service", "TimeoutStopSec"))
	need := cfg.Drain + stopBudget(t) + stopMargin
	if stop < need {
		t.Errorf("%s: TimeoutStopSec %v < drain %v + handoff and shutdown %v + margin %v = %v", unitFile, stop, cfg.Drain, stopBudget(t), stopMargin, need)
	}
	t.Logf("TimeoutStopSec %v >= drain %v + handoff and shutdown %v + margin %v", stop, cfg.Drain, stopBudget(t), stopMargin)
}

// TestSystemdAnalyze runs systemd-analyze verify and security on the unit,
// with ExecStart pointing at the built tokenringd; skipped without it.
func TestSystemdAnalyze(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not found")
	}
	u := readFile(t, unitFile)
	u = strings.Replace(u, "ExecStart=/usr/local/bin/tokenringd", "ExecStart="+tokenringd, 1)
	u = strings.Replace(u, "EnvironmentFile=/", "EnvironmentFile=-/", 1) // not installed here
	f := filepath.Join(t.TempDir(), "tokenringd.service")
	if err := os.WriteFile(f, []byte(u), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sa, "verify", f).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
	// Exposure on systemd's 0-10 scale, ×10: at most 2.0 ("OK").
	out, err := exec.Command(sa, "security", "--offline=yes", "--threshold=20", f).CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil {
		t.Errorf("systemd-analyze security %s: %v\n%s", unitFile, err, out)
	} else {
		t.Log(lines[len(lines)-1])
	}
}

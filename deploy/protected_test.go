package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clientTokenEnv is the variable holding the decision API's client token,
// which the configs name as a clients: key.
const clientTokenEnv = "TOKENRING_CLIENT_TOKEN"

// TestProtectedMode: the image's ENTRYPOINT binds 0.0.0.0, so tokenringd
// started with it and neither a cluster secret nor client tokens refuses to
// start (exit status 2, before binding anything), naming the fix; and every
// deployment gives it both: the StatefulSet and the systemd env file set
// TOKENRING_CLUSTER_SECRET and TOKENRING_CLIENT_TOKEN, which their configs
// use as cluster_secret and as a clients: token.
func TestProtectedMode(t *testing.T) {
	img := checkDockerfile(t)
	cmd := exec.Command(tokenringd, img.Entrypoint[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr.String(), "protected mode") ||
		!strings.Contains(stderr.String(), "TOKENRING_CLUSTER_SECRET") {
		t.Fatalf("tokenringd %q without a secret: %v, %q; want exit 2 naming protected mode and TOKENRING_CLUSTER_SECRET", img.Entrypoint[1:], err, stderr.String())
	}

	d := loadDeployment(t)
	for _, name := range []string{"TOKENRING_CLUSTER_SECRET", clientTokenEnv} {
		set := false
		for _, e := range d.c.Env {
			set = set || (e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil)
		}
		if !set {
			t.Errorf("the StatefulSet does not set %s from the Secret", name)
		}
		if _, ok := readEnvFile(t, unitEnvFile)[name]; !ok {
			t.Errorf("%s does not set %s", unitEnvFile, name)
		}
	}
	for where, text := range map[string]string{"the ConfigMap's config": d.configText(t), unitConfig: readFile(t, unitConfig)} {
		if !strings.Contains(text, `cluster_secret: "${TOKENRING_CLUSTER_SECRET}"`) {
			t.Errorf("%s does not use ${TOKENRING_CLUSTER_SECRET} as cluster_secret", where)
		}
		if !strings.Contains(text, "clients:\n") || !strings.Contains(text, `"${`+clientTokenEnv+`}": {tenants:`) {
			t.Errorf("%s has no clients: entry keyed by ${%s}", where, clientTokenEnv)
		}
	}
}

// TestShippedConfigStartsProtected: the StatefulSet's command line, its
// environment (the Secret's placeholders) and the ConfigMap's config start
// a real tokenringd with every listener on 0.0.0.0, as in a pod, under
// protected mode (no -insecure, no TOKENRING_INSECURE): it serves, its
// decision API wants the client token (401 without it, 200 with it), and
// it is the only thing the member needs. The same for the systemd unit's
// ExecStart with its env file. (Bound to 0.0.0.0 on free ports for the
// seconds of the test; the test reaches them on 127.0.0.1 only.)
func TestShippedConfigStartsProtected(t *testing.T) {
	if testing.Short() {
		t.Skip("starts tokenringd processes")
	}
	d := loadDeployment(t)
	for _, e := range d.c.Env {
		if strings.HasSuffix(e.Name, "INSECURE") {
			t.Errorf("the StatefulSet sets %s: the shipped config must start under protected mode", e.Name)
		}
	}
	m := startMemberOn(t, d, d.configText(t), "tokenring-0", nil, "0.0.0.0")
	checkProtectedMember(t, m)

	u := parseUnit(t, unitFile)
	argv := strings.Fields(u.get("Service", "ExecStart"))
	c := parseCommandLine(t, unitFile+" ExecStart", argv[1:])
	env := readEnvFile(t, unitEnvFile)
	env[envName("join")] = "" // the first node of a cluster
	s := startUnit(t, c, readFile(t, unitConfig), env)
	checkProtectedMember(t, s)
}

// checkProtectedMember: m serves /healthz and /readyz, and answers an
// acquire 401 without its client token and 200 with it.
func checkProtectedMember(t *testing.T, m *member) {
	t.Helper()
	waitFor(t, m, "200 on /readyz", 30*time.Second, func() bool {
		s, _ := get(m.url("/readyz"))
		return s == http.StatusOK
	})
	if s, body := acquireAs(t, m, "acme", ""); s != http.StatusUnauthorized {
		t.Errorf("%s: acquire without a token: %d %s, want 401", m.name, s, body)
	}
	if s, body := acquireAs(t, m, "acme", m.token); s != http.StatusOK {
		t.Errorf("%s: acquire with the client token: %d %s, want 200", m.name, s, body)
	}
	if !strings.Contains(m.log.String(), "tokenringd serving") {
		t.Errorf("%s: no \"tokenringd serving\" in its log:\n%s", m.name, m.log)
	}
}

// startUnit runs tokenringd as the systemd unit would: ExecStart's flags
// (each listener's 0.0.0.0 kept, on a free port; -config a copy of
// configText) and env, which is the process's whole environment; and
// -advertise 127.0.0.1.
func startUnit(t *testing.T, c commandLine, configText string, env map[string]string) *member {
	t.Helper()
	m := &member{name: "systemd", log: &lockedBuffer{}, done: make(chan struct{}), token: env[clientTokenEnv]}
	cfgPath := filepath.Join(t.TempDir(), "tokenring.yaml")
	if err := os.WriteFile(cfgPath, []byte(configText), 0o600); err != nil {
		t.Fatal(err)
	}
	var argv []string
	for _, f := range c.Flags {
		v := f.Value
		switch f.Name {
		case "http", "gossip", "peer":
			host, _, _ := strings.Cut(v, ":")
			port := freePort(t)
			v = fmt.Sprintf("%s:%d", host, port)
			if f.Name == "http" {
				m.http = fmt.Sprintf("127.0.0.1:%d", port)
			}
		case "config":
			v = cfgPath
		}
		argv = append(argv, "-"+f.Name+"="+v)
	}
	env[envName("advertise")] = "127.0.0.1"
	cmd := exec.Command(tokenringd, argv...)
	for k, v := range env {
		if v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stdout, cmd.Stderr = m.log, m.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
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
			t.Logf("systemd: tokenringd %s\n%s", strings.Join(argv, " "), m.log)
		}
	})
	return m
}

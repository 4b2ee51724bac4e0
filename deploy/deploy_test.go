package deploy

// The deployment files are checked against the real tokenringd, built once
// by TestMain from ../cmd/tokenringd:
//
//   - its flags come from `tokenringd -h` (parseFlags is in package main and
//     cannot be imported), and every flag the Dockerfile, the StatefulSet and
//     the systemd unit pass, or set as TOKENRING_<FLAG>, must be one of them;
//   - the ports of -http, -gossip and -peer must be the image's EXPOSE, the
//     containerPorts, the Services' and probes' targets and the NetworkPolicy's;
//   - the configs load with config.Load, every ${NAME} they reference is set;
//   - terminationGracePeriodSeconds and TimeoutStopSec cover the config's
//     drain plus the handoff's timeouts, read from main.go's drain();
//   - TestLive runs the StatefulSet's command line (addresses moved to free
//     loopback ports) as a two-member cluster, GETs the probes' paths, kills
//     a member to get fallback decisions, and checks that every metric named
//     by the alert rules and the dashboard is in a live /metrics.
//
// Docker is not needed: the Dockerfile is checked statically.

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/config"
)

// pendingFlags are flags the deployment files pass that tokenringd may not
// have yet. While the binary lacks one, the test logs it, accepts it, and
// leaves it out of the command lines it runs; once the binary has it, it is
// checked like any other.
var pendingFlags = map[string]string{}

// stopMargin is what terminationGracePeriodSeconds and TimeoutStopSec must
// leave beyond the worst case of a drain (process exit, a slow scheduler).
const stopMargin = 5 * time.Second

// tokenringd is the binary TestMain builds.
var tokenringd string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tokenring-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tokenringd = filepath.Join(dir, "tokenringd")
	build := exec.Command(goTool(), "build", "-o", tokenringd, "./cmd/tokenringd")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/tokenringd: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// flagInfo is one flag of tokenringd, from its -h output.
type flagInfo struct {
	Name, Type, Default string // Type is empty for a bool flag
}

var (
	flagsOnce sync.Once
	flagsSet  map[string]flagInfo
	flagsErr  error
)

// binaryFlags returns tokenringd's flags, parsed from `tokenringd -h`.
func binaryFlags(t *testing.T) map[string]flagInfo {
	t.Helper()
	flagsOnce.Do(func() {
		out, _ := exec.Command(tokenringd, "-h").CombinedOutput() // exits 2
		flagsSet, flagsErr = parseUsage(string(out))
	})
	if flagsErr != nil {
		t.Fatal(flagsErr)
	}
	return flagsSet
}

var (
	usageHead    = regexp.MustCompile(`^  -([A-Za-z0-9][\w.-]*)(?: (\S+))?$`)
	usageDefault = regexp.MustCompile(`\(default ("(?:[^"\\]|\\.)*"|\S+)\)$`)
)

// parseUsage reads the flag package's usage text: "  -name type" lines, each
// followed by its indented usage, which ends with "(default X)" when the
// default is not the zero value.
func parseUsage(out string) (map[string]flagInfo, error) {
	flags := map[string]flagInfo{}
	var cur *flagInfo
	flush := func() {
		if cur != nil {
			flags[cur.Name] = *cur
		}
	}
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		if m := usageHead.FindStringSubmatch(line); m != nil {
			flush()
			cur = &flagInfo{Name: m[1], Type: m[2]}
			continue
		}
		if cur != nil && strings.HasPrefix(line, "    \t") {
			if m := usageDefault.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
				cur.Default = m[1]
				if s, err := strconv.Unquote(m[1]); err == nil {
					cur.Default = s
				}
			}
		}
	}
	flush()
	if len(flags) == 0 || flags["http"].Name == "" {
		return nil, fmt.Errorf("tokenringd -h printed no flags (or no -http):\n%s", out)
	}
	return flags, nil
}

// envName is the environment variable tokenringd reads for a flag.
func envName(flag string) string {
	return "TOKENRING_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// setFlag is one flag on a command line, as given.
type setFlag struct{ Name, Value string }

// commandLine is a tokenringd command line from a deployment file.
type commandLine struct {
	Where string    // for messages
	Flags []setFlag // in order
}

// Get returns the value of the last occurrence of name (the flag package's
// rule), or the binary's default.
func (c commandLine) Get(t *testing.T, name string) (string, bool) {
	for _, f := range slices.Backward(c.Flags) {
		if f.Name == name {
			return f.Value, true
		}
	}
	return binaryFlags(t)[name].Default, false
}

// parseCommandLine parses args (without the program name) the way the flag
// package does, against tokenringd's real flags and pendingFlags, and checks
// the values of typed flags. It reports every problem.
func parseCommandLine(t *testing.T, where string, args []string) commandLine {
	t.Helper()
	flags := binaryFlags(t)
	c := commandLine{Where: where}
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			t.Errorf("%s: %q: tokenringd takes no arguments besides flags", where, args[i:])
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		info, ok := flags[name]
		if !ok {
			if _, pending := pendingFlags[name]; !pending {
				t.Errorf("%s: -%s: tokenringd has no such flag", where, name)
				continue
			}
			info = flagInfo{Name: name, Type: "string"}
		}
		switch {
		case info.Type == "" && !hasValue:
			value = "true"
		case !hasValue && i+1 < len(args):
			i++
			value = args[i]
		case !hasValue:
			t.Errorf("%s: -%s needs a value", where, name)
			continue
		}
		if seen[name] {
			t.Errorf("%s: -%s given twice (the later wins): say it once", where, name)
		}
		seen[name] = true
		checkFlagValue(t, where, info, value)
		c.Flags = append(c.Flags, setFlag{name, value})
	}
	return c
}

func checkFlagValue(t *testing.T, where string, f flagInfo, v string) {
	t.Helper()
	var err error
	switch f.Type {
	case "duration":
		_, err = time.ParseDuration(v)
	case "int":
		_, err = strconv.Atoi(v)
	case "":
		_, err = strconv.ParseBool(v)
	case "addr":
		_, _, err = net.SplitHostPort(v)
	}
	if err != nil {
		t.Errorf("%s: -%s %q: %v", where, f.Name, v, err)
	}
}

// pendingLogged: a pending flag is logged once per test.
var pendingLogged sync.Map

// hasFlag reports whether the built tokenringd has flag name, and logs a
// pending flag it lacks.
func hasFlag(t *testing.T, name string) bool {
	t.Helper()
	if _, ok := binaryFlags(t)[name]; ok {
		return true
	}
	if _, again := pendingLogged.LoadOrStore(t.Name()+" "+name, true); again {
		return false
	}
	if why, ok := pendingFlags[name]; ok {
		t.Logf("tokenringd has no -%s yet (%s): the deployment files pass it, the test accepts it and leaves it out of what it runs", name, why)
	}
	return false
}

// ports are a command line's listening ports.
type ports struct{ HTTP, Gossip, Peer int }

// listenPorts returns the ports of -http, -gossip and -peer (given or
// default) and checks that each listens on every interface with a fixed
// port, as a container or a host service must.
func listenPorts(t *testing.T, c commandLine) ports {
	t.Helper()
	var p ports
	for _, l := range []struct {
		flag string
		port *int
	}{{"http", &p.HTTP}, {"gossip", &p.Gossip}, {"peer", &p.Peer}} {
		v, _ := c.Get(t, l.flag)
		host, port, err := net.SplitHostPort(v)
		if err != nil {
			t.Errorf("%s: -%s %q: want host:port with a fixed port: %v", c.Where, l.flag, v, err)
			continue
		}
		if host != "0.0.0.0" && host != "" && host != "::" {
			t.Errorf("%s: -%s %q: bind all interfaces (0.0.0.0): others cannot reach %s", c.Where, l.flag, v, host)
		}
		if *l.port, err = strconv.Atoi(port); err != nil || *l.port <= 0 {
			t.Errorf("%s: -%s %q: want a fixed port", c.Where, l.flag, v)
		}
	}
	return p
}

// configRefs returns the ${NAME} references of a config text (not $${,
// the escape), each with whether it has a default (${NAME:-default}).
var configRef = regexp.MustCompile(`(\$?)\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}`)

func configRefs(text string) map[string]bool {
	refs := map[string]bool{}
	for _, m := range configRef.FindAllStringSubmatch(text, -1) {
		if m[1] == "" {
			refs[m[2]] = refs[m[2]] || m[3] != ""
		}
	}
	return refs
}

// loadConfig loads text with config.Load (from a file, as tokenringd does)
// with env as the environment, after checking that env sets every ${NAME}
// the text references without a default.
func loadConfig(t *testing.T, where, text string, env map[string]string) config.Config {
	t.Helper()
	for name, hasDefault := range configRefs(text) {
		if env[name] == "" && !hasDefault {
			t.Errorf("%s: ${%s} is referenced but not set in the environment", where, name)
		}
	}
	path := filepath.Join(t.TempDir(), "tokenring.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%s: config.Load: %v", where, err)
	}
	return cfg
}

// checkEnvNames checks the TOKENRING_* variables a deployment sets: each
// is a flag's (and that flag is not also on the command line, where it
// would win) or a ${NAME} of the config (and not a flag's, which would set
// the flag too).
func checkEnvNames(t *testing.T, where string, env map[string]string, c commandLine, refs map[string]bool) {
	t.Helper()
	flagEnv := map[string]string{}
	for name := range binaryFlags(t) {
		flagEnv[envName(name)] = name
	}
	for name := range pendingFlags {
		flagEnv[envName(name)] = name
	}
	for k := range env {
		if !strings.HasPrefix(k, "TOKENRING_") {
			continue
		}
		flag, isFlag := flagEnv[k]
		_, referenced := refs[k]
		switch {
		case isFlag && referenced:
			t.Errorf("%s: %s is referenced by the config but is also -%s's variable", where, k, flag)
		case isFlag:
			if _, given := c.Get(t, flag); given {
				t.Errorf("%s: %s is ignored: -%s is on the command line too", where, k, flag)
			}
		case !referenced:
			t.Errorf("%s: %s is neither a flag's variable nor referenced by the config", where, k)
		}
	}
}

// stopBudget is the longest a SIGTERM'd tokenringd may take to exit once
// its drain period is over: the literal timeouts of main.go's drain()
// (announcing the leave, the handoff, the debts, leaving gossip) plus the
// HTTP server's shutdown bound in shutdownHTTP() (context.WithTimeout).
func stopBudget(t *testing.T) time.Duration {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../cmd/tokenringd/main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var drain, run time.Duration
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		switch fn.Name.Name {
		case "drain":
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if d, ok := literalDuration(n); ok {
					drain += d
				}
				return true
			})
		case "shutdownHTTP":
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok && isSelector(call.Fun, "context", "WithTimeout") && len(call.Args) == 2 {
					if d, ok := literalDuration(call.Args[1]); ok {
						run += d
					}
				}
				return true
			})
		}
	}
	if drain == 0 || run == 0 {
		t.Fatalf("cmd/tokenringd/main.go: found no literal timeouts in drain() (%v) or no context.WithTimeout in shutdownHTTP() (%v): update stopBudget to how tokenringd bounds its shutdown now", drain, run)
	}
	return drain + run
}

// literalDuration evaluates `N * time.Second` and `N * time.Millisecond`.
func literalDuration(n ast.Node) (time.Duration, bool) {
	b, ok := n.(*ast.BinaryExpr)
	if !ok || b.Op != token.MUL {
		return 0, false
	}
	lit, ok := b.X.(*ast.BasicLit)
	if !ok || lit.Kind != token.INT {
		return 0, false
	}
	v, err := strconv.Atoi(lit.Value)
	if err != nil {
		return 0, false
	}
	switch {
	case isSelector(b.Y, "time", "Second"):
		return time.Duration(v) * time.Second, true
	case isSelector(b.Y, "time", "Millisecond"):
		return time.Duration(v) * time.Millisecond, true
	}
	return 0, false
}

func isSelector(e ast.Expr, pkg, name string) bool {
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := s.X.(*ast.Ident)
	return ok && id.Name == pkg && s.Sel.Name == name
}

// readEnvFile reads KEY=VALUE lines (systemd's EnvironmentFile, without
// quotes), skipping comments and blank lines.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("%s:%d: want KEY=VALUE, got %q", path, n, line)
			continue
		}
		env[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return env
}

// placeholder reports whether a secret's value is clearly a placeholder.
func placeholder(v string) bool { return strings.HasPrefix(v, "REPLACE-ME") }

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

package test

// Network namespaces for the multi-process partition tests: one namespace
// per node and one "lan" namespace holding a bridge, each node's veth
// plugged into it. Nodes gossip and forward over the bridge (the "cluster
// network"); their HTTP APIs listen on the loopback of their own namespace,
// which the test reaches through a dialer that enters the namespace, so
// cutting a node off the bridge never cuts its clients.
//
// Everything here runs ip(8) and needs root; a test calls newNetLab, which
// skips (or, with CI=true, fails) when that is not possible. The lab is torn
// down by t.Cleanup, and a lab left behind by a test process that died
// (SIGKILL, go test -timeout) is removed by the next one.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// netnsDir is where ip(8) keeps its named network namespaces.
const netnsDir = "/var/run/netns"

// labName matches the namespaces of a lab: "tr-<pid base 36>-<2 hex>-<role>",
// role "lan", "lb" (a load balancer's host) or a node name. The pid is the test process that made it.
var labName = regexp.MustCompile(`^tr-([0-9a-z]{1,6})-([0-9a-f]{2})-(lan|lb|n[0-9]+)$`)

// labSeq numbers the labs of this process (from a random start, so that a
// pid reused soon after a crash does not meet its predecessor's names).
var labSeq = func() *atomic.Uint32 {
	var n atomic.Uint32
	n.Store(rand.Uint32())
	return &n
}()

// netLab is a set of network namespaces made for one test.
type netLab struct {
	t      *testing.T
	prefix string // "tr-<pid>-<rand>": every namespace name starts with it
	lan    string // the namespace holding the bridge
	subnet string // "10.A.B": the bridge's /24 is 10.A.B.0/24
	nodes  []*labNode
	made   []string // namespaces created, deleted by cleanup
}

// labNode is one node's place in a lab.
type labNode struct {
	Name   string       // the tokenringd node name (n1, ...)
	NS     string       // its network namespace
	IP     string       // its address on the bridge
	Port   string       // the bridge-side end of its veth, in the lan namespace
	HTTP   string       // its HTTP address, on the loopback of NS
	Client *http.Client // reaches NS's loopback (and anything else NS reaches)
}

// needNetLab skips the test, or fails it when CI is "true" (CI must not
// skip silently), unless it can make network namespaces: root and ip(8).
func needNetLab(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "network namespaces need root (euid %d)", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		skipOrFail(t, "ip (iproute2) not found: %v", err)
	}
}

func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true, so not skipping: %s", msg)
	}
	t.Skipf("skipping: %s", msg)
}

// ipCmd runs ip(8) with args (bounded to 10 s) and returns its error with
// its output.
func ipCmd(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetLab makes a lan namespace with a bridge and, for every name in
// nodes, a namespace with lo up and a veth to the bridge holding address
// 10.A.B.(i+1)/24 (A in 100..250 and B random). A failure to build it skips
// the test (fails it under CI=true): it is the machine, not tokenring.
func newNetLab(t *testing.T, nodes ...string) *netLab {
	t.Helper()
	needNetLab(t)
	sweepStaleLabs(t)
	l := &netLab{t: t, subnet: fmt.Sprintf("10.%d.%d", 100+rand.IntN(151), rand.IntN(256))}
	for range 256 { // a name not taken (by a lab left behind under a reused pid, say)
		l.prefix = fmt.Sprintf("tr-%s-%02x", strconv.FormatInt(int64(os.Getpid()), 36), labSeq.Add(1)%256)
		if _, err := os.Stat(filepath.Join(netnsDir, l.prefix+"-lan")); err != nil {
			break
		}
	}
	l.lan = l.prefix + "-lan"
	t.Cleanup(l.destroy)
	step := func(args ...string) {
		t.Helper()
		if err := ipCmd(args...); err != nil {
			skipOrFail(t, "cannot build the network namespaces: %v", err)
		}
	}
	addNS := func(ns string) {
		t.Helper()
		step("netns", "add", ns)
		l.made = append(l.made, ns)
		step("-n", ns, "link", "set", "lo", "up")
	}
	addNS(l.lan)
	step("-n", l.lan, "link", "add", "br0", "type", "bridge")
	step("-n", l.lan, "link", "set", "br0", "up")
	for i, name := range nodes {
		l.addHost(name, i+1, step)
	}
	return l
}

// addHost makes a namespace for name with lo up and a veth to the bridge
// holding address 10.A.B.octet/24.
func (l *netLab) addHost(name string, octet int, step func(args ...string)) *labNode {
	l.t.Helper()
	n := &labNode{
		Name: name,
		NS:   l.prefix + "-" + name,
		IP:   fmt.Sprintf("%s.%d", l.subnet, octet),
		Port: fmt.Sprintf("vb%d", octet),
		HTTP: fmt.Sprintf("127.0.0.1:%d", 18080+octet),
	}
	n.Client = nsClient(n.NS)
	step("netns", "add", n.NS)
	l.made = append(l.made, n.NS)
	step("-n", n.NS, "link", "set", "lo", "up")
	step("-n", l.lan, "link", "add", n.Port, "type", "veth", "peer", "name", "eth0", "netns", n.NS)
	step("-n", n.NS, "addr", "add", n.IP+"/24", "dev", "eth0")
	step("-n", n.NS, "link", "set", "eth0", "up")
	step("-n", l.lan, "link", "set", n.Port, "master", "br0")
	step("-n", l.lan, "link", "set", n.Port, "up")
	l.nodes = append(l.nodes, n)
	return n
}

// AddHost adds one more host to the lab, a namespace on the bridge at
// 10.A.B.octet (octet above the nodes', below 255), for something other
// than a node: "lb", a load balancer the test reaches through its Client.
func (l *netLab) AddHost(name string, octet int) *labNode {
	l.t.Helper()
	return l.addHost(name, octet, func(args ...string) {
		l.t.Helper()
		if err := ipCmd(args...); err != nil {
			skipOrFail(l.t, "cannot build the network namespaces: %v", err)
		}
	})
}

// labClusterSecret is the cluster secret of the lab's nodes: they bind
// non-loopback addresses, which tokenringd refuses without one (protected
// mode). A test constant, 32+ bytes.
const labClusterSecret = "tokenring-netns-lab-cluster-secret-0123456789"

// nsExec is the Proc.Prefix that starts a binary in namespace ns with the
// lab's cluster secret in its environment (env execs the binary, so the
// process keeps its pid). TOKENRING_INSECURE lets its -http, on the lab's
// private bridge and reached by the test alone, run without client tokens
// (protected mode judges each port: the secret guards -peer and -gossip).
func nsExec(ns string) []string {
	return []string{"ip", "netns", "exec", ns, "env", "TOKENRING_CLUSTER_SECRET=" + labClusterSecret, "TOKENRING_INSECURE=true"}
}

// PlaceAllInterfaces is a ClusterOptions.Place for "many hosts": every node
// listens on all interfaces of its namespace (0.0.0.0) on the same ports
// as the others (HTTP 8095, peer 7996, gossip 7946) and advertises its
// bridge address with -advertise. The test reaches it at that address,
// through its namespace; others join it there.
func (l *netLab) PlaceAllInterfaces(p *Proc) {
	n := l.node(p.Name)
	p.HTTP = n.IP + ":8095"
	p.Peer = n.IP + ":7996"
	p.Gossip = n.IP + ":7946"
	p.Client = n.Client
	p.Prefix = nsExec(n.NS)
	p.Args = []string{"-http", "0.0.0.0:8095", "-peer", "0.0.0.0:7996", "-gossip", "0.0.0.0:7946", "-advertise", n.IP}
}

// node returns the lab node called name; it fails the test if there is none.
func (l *netLab) node(name string) *labNode {
	l.t.Helper()
	for _, n := range l.nodes {
		if n.Name == name {
			return n
		}
	}
	l.t.Fatalf("no node %q in the lab", name)
	return nil
}

// Place is a ClusterOptions.Place: the node named p.Name listens for peers
// and gossip on its bridge address, serves HTTP on its namespace's loopback,
// is reached through its namespace and started inside it.
func (l *netLab) Place(p *Proc) {
	n := l.node(p.Name)
	p.HTTP = n.HTTP
	p.Peer = n.IP + ":7000"
	p.Gossip = n.IP + ":7946"
	p.Client = n.Client
	p.Prefix = nsExec(n.NS)
}

// Cut takes name's bridge port down: from then on every packet between
// name and the other nodes is dropped, with no error sent back to anyone.
func (l *netLab) Cut(name string) error {
	return ipCmd("-n", l.lan, "link", "set", l.node(name).Port, "down")
}

// Heal puts name's bridge port up again.
func (l *netLab) Heal(name string) error {
	return ipCmd("-n", l.lan, "link", "set", l.node(name).Port, "up")
}

// Describe is the lab's layout, for a test log.
func (l *netLab) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "bridge br0 in %s, %s.0/24", l.lan, l.subnet)
	for _, n := range l.nodes {
		fmt.Fprintf(&b, "; %s in %s: %s (port %s), http %s", n.Name, n.NS, n.IP, n.Port, n.HTTP)
	}
	return b.String()
}

// Probe dials TCP port 9 (where nothing listens) of to's bridge address
// from inside from's namespace, and says what happened: "refused" (the
// other side answered with a reset: reachable), "timeout" or "unreachable"
// (no answer at all, or the neighbour never answered ARP: a silent cut),
// "open" (something listens there) or the error.
func (l *netLab) Probe(from, to string, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := nsDialer(l.node(from).NS)(ctx, "tcp", l.node(to).IP+":9")
	var ne net.Error
	switch {
	case err == nil:
		c.Close()
		return "open"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	default:
		return err.Error()
	}
}

// destroy closes the idle connections into the lab and deletes its
// namespaces (the veths and the bridge go with them). The processes in
// them must have been stopped already: the Cluster's cleanup, registered
// after the lab's, runs before it.
func (l *netLab) destroy() {
	for _, n := range l.nodes {
		n.Client.CloseIdleConnections()
	}
	for _, ns := range l.made {
		if err := ipCmd("netns", "del", ns); err != nil {
			l.t.Errorf("remove the lab: %v", err)
		}
	}
}

// sweepStaleLabs deletes the namespaces of labs whose test process is gone
// and in which no process runs any more (a test process killed before its
// cleanup ran leaves them behind; its nodes died with it, by Pdeathsig).
// Labs of other live test processes, and this process's own, are left
// alone.
func sweepStaleLabs(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return // no named namespace at all yet
	}
	groups := map[string][]string{} // lab prefix -> its namespaces
	pids := map[string]int{}
	for _, e := range entries {
		m := labName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.ParseInt(m[1], 36, 64)
		if err != nil || int(pid) == os.Getpid() {
			continue
		}
		prefix := "tr-" + m[1] + "-" + m[2]
		groups[prefix] = append(groups[prefix], e.Name())
		pids[prefix] = int(pid)
	}
	for prefix, names := range groups {
		if err := syscall.Kill(pids[prefix], 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // its test process still runs
		}
		busy := false
		for _, ns := range names {
			out, err := exec.Command("ip", "netns", "pids", ns).Output()
			if err != nil || strings.TrimSpace(string(out)) != "" {
				busy = true
			}
		}
		if busy {
			continue
		}
		for _, ns := range names {
			if err := ipCmd("netns", "del", ns); err != nil {
				t.Logf("stale lab namespace %s not removed: %v", ns, err)
			}
		}
		t.Logf("removed the stale lab %s (test process %d gone): %v", prefix, pids[prefix], names)
	}
}

// nsClient is an HTTP client whose connections are made inside the network
// namespace ns (its TCP sockets live there; the test process stays in its
// own). Requests are bounded to 30 s; callers bound theirs further with
// their context.
func nsClient(ns string) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil, // never an environment proxy: the address is the namespace's own
			DialContext:         nsDialer(ns),
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 64, // keep-alive for a load driver's clients and health checks
			IdleConnTimeout:     90 * time.Second,
		},
	}
}

// nsDialer returns a DialContext that dials from inside the network
// namespace ns. The address must be an IP literal and a port (a name would
// be resolved by other goroutines, on threads outside ns).
//
// A network namespace belongs to an OS thread, not to a goroutine: each
// dial runs on a fresh goroutine locked to its thread, which enters ns,
// makes the socket (a socket stays in the namespace it was made in), and
// goes back to the namespace it came from before the thread is unlocked.
// If going back fails, the thread stays locked and so ends with the
// goroutine: no other goroutine ever runs in ns.
func nsDialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	path := filepath.Join(netnsDir, ns)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if _, err := netip.ParseAddr(host); err != nil {
			return nil, fmt.Errorf("dial %s in netns %s: want an IP address, not a name: %w", addr, ns, err)
		}
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			c, err := dialInNetns(ctx, path, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// dialInNetns dials addr from inside the namespace at path; see nsDialer.
// It must run on a goroutine of its own that ends when it returns.
func dialInNetns(ctx context.Context, path, network, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	restored := true // the thread is in the namespace it started in
	defer func() {
		if restored {
			runtime.UnlockOSThread()
		}
	}()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("save this thread's network namespace: %w", err)
	}
	defer orig.Close()
	target, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("enter network namespace %s: %w", path, err)
	}
	restored = false
	var d net.Dialer
	c, dialErr := d.DialContext(ctx, network, addr)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("leave network namespace %s (the thread is discarded): %w", path, err)
	}
	restored = true
	if dialErr != nil {
		return nil, fmt.Errorf("dial %s in %s: %w", addr, filepath.Base(path), dialErr)
	}
	return c, nil
}

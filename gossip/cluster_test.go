package gossip

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testLogger returns a logger that writes to t.Log until the test ends, and
// drops what memberlist's goroutines still say after that.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.stop) // registered first, so it runs after every other cleanup
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct {
	mu   sync.Mutex // guards done and serialises calls to t.Log
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
}

// localConfig returns DefaultLocalConfig for node name, with made-up client
// and peer addresses.
func localConfig(t *testing.T, name string, join ...string) Config {
	cfg := DefaultLocalConfig()
	cfg.Name = name
	cfg.Meta = Meta{HTTP: "127.0.0.1:8080/" + name, Peer: "127.0.0.1:7000/" + name}
	cfg.Join = join
	cfg.Logger = testLogger(t)
	return cfg
}

// start starts a cluster member and shuts it down at the end of the test.
func start(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	c, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
	return c
}

// startThree starts n1, then n2 and n3 joining n1.
func startThree(t *testing.T) []*Cluster {
	t.Helper()
	n1 := start(t, localConfig(t, "n1"))
	n2 := start(t, localConfig(t, "n2", n1.Local().Addr))
	n3 := start(t, localConfig(t, "n3", n1.Local().Addr))
	cs := []*Cluster{n1, n2, n3}
	waitFor(t, 5*time.Second, "3 members everywhere", func() bool { return allSee(cs, names(cs)...) })
	return cs
}

// waitFor polls cond until it holds or timeout passes, and returns how long
// it took.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	begin := time.Now()
	deadline := begin.Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(begin)
}

// port returns the port of a host:port address.
func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func names(cs []*Cluster) []string {
	var ns []string
	for _, c := range cs {
		ns = append(ns, c.LocalName())
	}
	return ns
}

func memberNames(ms []MemberState) []string {
	var ns []string
	for _, m := range ms {
		ns = append(ns, m.Name)
	}
	return ns
}

// allSee reports whether every cluster in cs has exactly the members want
// (sorted).
func allSee(cs []*Cluster, want ...string) bool {
	for _, c := range cs {
		if !slices.Equal(memberNames(c.Members()), want) {
			return false
		}
	}
	return true
}

// latest waits for a snapshot satisfying ok on c.Events.
func latest(t *testing.T, c *Cluster, timeout time.Duration, ok func(Snapshot) bool) Snapshot {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var last Snapshot
	for {
		select {
		case s, open := <-c.Events():
			if !open {
				t.Fatalf("%s: events closed; last snapshot %+v", c.LocalName(), last)
			}
			if s.Seq <= last.Seq {
				t.Fatalf("%s: snapshot %d after %d", c.LocalName(), s.Seq, last.Seq)
			}
			last = s
			if ok(s) {
				return s
			}
		case <-timer.C:
			t.Fatalf("%s: no matching snapshot after %v; last %+v", c.LocalName(), timeout, last)
		}
	}
}

func TestJoin(t *testing.T) {
	n1 := start(t, localConfig(t, "n1"))
	n2 := start(t, localConfig(t, "n2", n1.Local().Addr))

	begin := time.Now()
	n3 := start(t, localConfig(t, "n3", n1.Local().Addr, n2.Local().Addr))
	cs := []*Cluster{n1, n2, n3}
	waitFor(t, 5*time.Second, "3 members everywhere", func() bool { return allSee(cs, "n1", "n2", "n3") })
	t.Logf("join convergence (Start of n3 until all 3 list 3 members): %v", time.Since(begin))

	byName := map[string]MemberState{}
	for _, c := range cs {
		local := c.Local()
		if len(local.Meta.BootID) != bootIDLen {
			t.Fatalf("%s: generated BootID %q", c.LocalName(), local.Meta.BootID)
		}
		if host, _, err := net.SplitHostPort(local.Addr); err != nil || host != "127.0.0.1" {
			t.Fatalf("%s: Local().Addr = %q", c.LocalName(), local.Addr)
		}
		byName[c.LocalName()] = local
	}
	for _, c := range cs {
		if got := c.NumMembers(); got != 3 {
			t.Fatalf("%s: NumMembers() = %d", c.LocalName(), got)
		}
		for _, m := range c.Members() {
			want := byName[m.Name]
			if m != want {
				t.Fatalf("%s sees %+v, want %+v", c.LocalName(), m, want)
			}
			if m.Meta.HTTP != "127.0.0.1:8080/"+m.Name || m.Meta.Peer != "127.0.0.1:7000/"+m.Name {
				t.Fatalf("%s sees meta %+v for %s", c.LocalName(), m.Meta, m.Name)
			}
		}
		s := latest(t, c, time.Second, func(s Snapshot) bool { return len(s.Members) == 3 })
		if !slices.Equal(s.Members, c.Members()) {
			t.Fatalf("%s: snapshot %+v, Members() %+v", c.LocalName(), s.Members, c.Members())
		}
	}
}

func TestLeave(t *testing.T) {
	cs := startThree(t)
	n3 := cs[2]

	begin := time.Now()
	if err := n3.Leave(time.Second); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	leaveReturned := time.Since(begin)
	waitFor(t, 5*time.Second, "n3 gone after Leave", func() bool { return allSee(cs[:2], "n1", "n2") })
	t.Logf("leave convergence (Leave called until n1 and n2 list 2 members): %v (Leave returned after %v)",
		time.Since(begin), leaveReturned)

	s := latest(t, cs[0], time.Second, func(s Snapshot) bool { return len(s.Members) == 2 })
	if s.Reason != "leave n3" {
		t.Fatalf("snapshot reason %q, want %q", s.Reason, "leave n3")
	}
	if err := n3.Leave(time.Second); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
	if err := n3.Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestCrash(t *testing.T) {
	cs := startThree(t)
	survivors := cs[:2]

	begin := time.Now()
	if err := cs[2].Shutdown(); err != nil { // no Leave: a crash
		t.Fatalf("Shutdown: %v", err)
	}
	waitFor(t, 10*time.Second, "n3 dropped after a crash", func() bool { return allSee(survivors, "n1", "n2") })
	t.Logf("crash detection (Shutdown without Leave until n1 and n2 list 2 members): %v", time.Since(begin))

	s := latest(t, cs[0], time.Second, func(s Snapshot) bool { return len(s.Members) == 2 })
	if s.Reason != "leave n3" {
		t.Fatalf("snapshot reason %q, want %q", s.Reason, "leave n3")
	}
}

// TestRestart checks that a node that restarts under its name at the same
// address is seen again, with its new BootID, whether or not the others had
// noticed the crash.
func TestRestart(t *testing.T) {
	cs := startThree(t)
	old := cs[2].Local()
	if err := cs[2].Shutdown(); err != nil {
		t.Fatal(err)
	}

	cfg := localConfig(t, "n3", cs[0].Local().Addr)
	cfg.BindPort = port(t, old.Addr)
	begin := time.Now()
	n3 := start(t, cfg)
	if n3.Local().Meta.BootID == old.Meta.BootID {
		t.Fatal("restart kept the BootID")
	}
	all := []*Cluster{cs[0], cs[1], n3}
	waitFor(t, 10*time.Second, "restarted n3 seen with its new BootID", func() bool {
		for _, c := range all {
			ms := c.Members()
			if len(ms) != 3 || ms[2] != n3.Local() {
				return false
			}
		}
		return true
	})
	t.Logf("restart under the same name and address converged in %v", time.Since(begin))
}

// TestRestartNewAddress checks that a node that crashed and restarts under
// its name on another port gets its name back once the cluster has declared
// the old one dead and DeadNodeReclaimTime has passed: the joins in the
// meantime conflict and are retried.
func TestRestartNewAddress(t *testing.T) {
	cs := startThree(t)
	if err := cs[2].Shutdown(); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	cfg := localConfig(t, "n3", cs[0].Local().Addr)
	cfg.JoinRetries = 50 // 10 s rather than DefaultLocalConfig's 4 s, for a loaded test machine
	n3 := start(t, cfg)
	all := []*Cluster{cs[0], cs[1], n3}
	waitFor(t, 5*time.Second, "restarted n3 seen at its new address", func() bool {
		for _, c := range all {
			ms := c.Members()
			if len(ms) != 3 || ms[2] != n3.Local() {
				return false
			}
		}
		return true
	})
	t.Logf("restart under the same name at a new address converged in %v", time.Since(begin))
}

func TestDuplicateName(t *testing.T) {
	n1 := start(t, localConfig(t, "n1"))
	n2 := start(t, localConfig(t, "n2", n1.Local().Addr))
	waitFor(t, 5*time.Second, "2 members", func() bool { return allSee([]*Cluster{n1, n2}, "n1", "n2") })

	for _, seed := range []*Cluster{n1, n2} {
		cfg := localConfig(t, "n1", seed.Local().Addr)
		cfg.JoinRetries = 1
		c, err := Start(cfg)
		if err == nil {
			_ = c.Shutdown()
			t.Fatalf("a second n1 joined through %s", seed.LocalName())
		}
		if !errors.Is(err, ErrNameConflict) {
			t.Fatalf("join of a second n1 through %s: %v, want ErrNameConflict", seed.LocalName(), err)
		}
		t.Logf("joining through %s: %v", seed.LocalName(), err)
	}
	// The original is untouched.
	time.Sleep(200 * time.Millisecond) // let any stray gossip arrive
	for _, c := range []*Cluster{n1, n2} {
		ms := c.Members()
		if len(ms) != 2 || ms[0] != n1.Local() {
			t.Fatalf("%s sees %+v after the conflict", c.LocalName(), ms)
		}
	}
}

func TestJoinGivesUp(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()

	cfg := localConfig(t, "lonely", dead)
	cfg.JoinRetries = 2
	cfg.JoinRetryInterval = 50 * time.Millisecond
	begin := time.Now()
	c, err := Start(cfg)
	if err == nil {
		_ = c.Shutdown()
		t.Fatal("joined a closed port")
	}
	if !strings.Contains(err.Error(), "gave up after 3 attempts") || !strings.Contains(err.Error(), dead) {
		t.Fatalf("error %q", err)
	}
	t.Logf("gave up after %v: %v", time.Since(begin), err)
}

func TestPortInUse(t *testing.T) {
	n1 := start(t, localConfig(t, "n1"))
	cfg := localConfig(t, "n2")
	cfg.BindPort = port(t, n1.Local().Addr)
	c, err := Start(cfg)
	if err == nil {
		_ = c.Shutdown()
		t.Fatal("started on a port in use")
	}
	if !strings.Contains(err.Error(), "gossip: start n2 on "+n1.Local().Addr) {
		t.Fatalf("error %q", err)
	}
}

func TestLifecycle(t *testing.T) {
	c := start(t, localConfig(t, "n1"))
	s := latest(t, c, time.Second, func(Snapshot) bool { return true })
	if s.Seq != 1 || s.Reason != "join n1" || len(s.Members) != 1 || s.Members[0] != c.Local() {
		t.Fatalf("first snapshot %+v", s)
	}
	if err := c.Leave(time.Second); err != nil { // alone: returns at once
		t.Fatalf("Leave alone: %v", err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if err := c.Leave(time.Second); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Leave after Shutdown: %v", err)
	}
	for range c.Events() { // drains and ends: the channel is closed
	}
}

// TestEventsCoalesce checks that a consumer that does not read never holds
// memberlist up, and then receives the newest snapshot only.
func TestEventsCoalesce(t *testing.T) {
	slow := start(t, localConfig(t, "a"))
	var cs []*Cluster
	for i := range 4 {
		cs = append(cs, start(t, localConfig(t, fmt.Sprintf("b%d", i), slow.Local().Addr)))
	}
	all := append([]*Cluster{slow}, cs...)
	waitFor(t, 5*time.Second, "5 members", func() bool { return allSee(all, names(all)...) })

	if n := len(slow.Events()); n != 1 {
		t.Fatalf("%d snapshots pending, want 1", n)
	}
	s := <-slow.Events()
	// 5 joins (a itself, then b0..b3) made at least 5 snapshots; only the
	// newest is left.
	if s.Seq < 5 || !slices.Equal(s.Members, slow.Members()) {
		t.Fatalf("pending snapshot %+v, want the newest, with 5 members", s)
	}
	if !slices.IsSortedFunc(s.Members, func(a, b MemberState) int { return strings.Compare(a.Name, b.Name) }) {
		t.Fatalf("members not sorted: %v", memberNames(s.Members))
	}
	select {
	case s := <-slow.Events():
		t.Fatalf("second snapshot %+v", s)
	default:
	}
}

func TestValidate(t *testing.T) {
	valid := func() Config {
		c := DefaultLocalConfig()
		c.Name = "n1"
		return c
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("DefaultLocalConfig: %v", err)
	}
	lan := DefaultLANConfig()
	lan.Name = "n1"
	if err := lan.Validate(); err != nil {
		t.Fatalf("DefaultLANConfig: %v", err)
	}
	if err := (Config{Name: "n1"}).Validate(); err != nil {
		t.Fatalf("zero Config with a name: %v", err)
	}

	// The largest meta that fits: 1 version byte, 3 length bytes (the
	// last a 2-byte uvarint), a 16-digit BootID filled in by Start.
	fits := valid()
	fits.Meta = Meta{HTTP: strings.Repeat("h", 100), Peer: strings.Repeat("p", 100)}
	fits.Meta.HTTP += strings.Repeat("h", MaxMetaSize-len(fits.Meta.encode())-bootIDLen-1)
	if err := fits.Validate(); err != nil {
		t.Fatalf("meta of %d bytes: %v", len(fits.Meta.encode())+bootIDLen, err)
	}

	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no name", func(c *Config) { c.Name = "" }, "name is required"},
		{"long name", func(c *Config) { c.Name = strings.Repeat("n", MaxNameSize+1) }, "name is 257 bytes"},
		{"meta too big", func(c *Config) { c.Meta.HTTP = strings.Repeat("h", MaxMetaSize) }, "meta is"},
		{"meta one byte too big", func(c *Config) { *c = fits; c.Meta.Peer += "p" }, "meta is 513 bytes"},
		{"meta too big with BootID", func(c *Config) { *c = fits; c.Meta.BootID = strings.Repeat("b", 17) }, "meta is 513 bytes"},
		{"bind hostname", func(c *Config) { c.BindAddr = "localhost" }, "bind address"},
		{"advertise hostname", func(c *Config) { c.AdvertiseAddr = "example.com" }, "advertise address"},
		{"bind port", func(c *Config) { c.BindPort = 70000 }, "bind port"},
		{"advertise port", func(c *Config) { c.AdvertisePort = -1 }, "advertise port"},
		{"empty join", func(c *Config) { c.Join = []string{"127.0.0.1:1", ""} }, "empty join address"},
		{"join retries", func(c *Config) { c.JoinRetries = -1 }, "join retries"},
		{"negative duration", func(c *Config) { c.ProbeInterval = -time.Second }, "probe interval"},
		{"negative int", func(c *Config) { c.GossipNodes = -1 }, "gossip nodes"},
		{"probe timeout", func(c *Config) { c.ProbeTimeout = c.ProbeInterval }, "probe timeout"},
		{"long label", func(c *Config) { c.Label = strings.Repeat("l", MaxLabelSize+1) }, "label is 256 bytes"},
		{"empty secret", func(c *Config) { c.Secrets = [][]byte{[]byte("k"), nil} }, "secret 1 is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid()
			tc.mod(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error with %q", err, tc.want)
			}
			if c, err := Start(cfg); err == nil {
				_ = c.Shutdown()
				t.Fatal("Start accepted the config")
			}
		})
	}
}

// TestDocumentedDefaults pins the LAN timings the Config fields document as
// their zero values, so that a memberlist upgrade that changes them is seen.
func TestDocumentedDefaults(t *testing.T) {
	got := DefaultLANConfig()
	want := Config{
		BindAddr: "0.0.0.0", BindPort: 7946, JoinRetries: 5, JoinRetryInterval: time.Second,
		ReconnectInterval: 10 * time.Second, ReconnectHorizon: 72 * time.Hour,
		ProbeInterval: time.Second, ProbeTimeout: 500 * time.Millisecond, IndirectChecks: 3,
		SuspicionMult: 4, SuspicionMaxTimeoutMult: 6, GossipInterval: 200 * time.Millisecond,
		GossipNodes: 3, RetransmitMult: 4, PushPullInterval: 5 * time.Second,
		TCPTimeout: 10 * time.Second, GossipToTheDeadTime: 30 * time.Second,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("DefaultLANConfig() =\n%+v\nwant (as documented)\n%+v", got, want)
	}
}

func TestZeroConfigDefaults(t *testing.T) {
	c := Config{Name: "n1"}.withDefaults()
	lan := DefaultLANConfig()
	lan.Name, lan.Logger = "n1", c.Logger
	lan.JoinRetries = 0 // zero JoinRetries means one attempt
	lan.BindPort = 0    // zero BindPort means a port chosen by the system
	lan.Label = DefaultLabel
	lan.MaxInboundStreams, lan.InboundStreamTimeout = DefaultMaxInboundStreams, DefaultInboundStreamTimeout
	if fmt.Sprint(c) != fmt.Sprint(lan) {
		t.Fatalf("zero config with defaults:\n%+v\nwant\n%+v", c, lan)
	}
}

func TestLogWriter(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		Level:       slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return dropTime(a) },
	}))
	std := newStdLogger(l)
	std.Printf("[DEBUG] memberlist: Stream connection from=%s", "1.2.3.4:5")
	std.Printf("[INFO] memberlist: Marking n3 as failed")
	std.Printf("[WARN] memberlist: Refuting a suspect message")
	std.Printf("[ERR] memberlist: Conflicting address for n1")
	std.Printf("no level")
	want := `level=DEBUG msg="Stream connection from=1.2.3.4:5" component=memberlist
level=DEBUG msg="Marking n3 as failed" component=memberlist
level=WARN msg="Refuting a suspect message" component=memberlist
level=ERROR msg="Conflicting address for n1" component=memberlist
level=DEBUG msg="no level" component=memberlist
`
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}

	// Disabled levels cost nothing and write nothing.
	buf.Reset()
	quiet := newStdLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	quiet.Printf("[DEBUG] memberlist: chatter")
	if buf.Len() != 0 {
		t.Fatalf("debug line written at warn level: %q", buf.String())
	}
}

func dropTime(a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// TestReconnectAfterDeath: memberlist never contacts a member it declared
// dead again, so a member that comes back where it was, knowing nobody (a
// healed network partition looks the same from either side), is found only
// because the survivors keep trying departed members.
func TestReconnectAfterDeath(t *testing.T) {
	n1 := start(t, localConfig(t, "n1"))
	n2 := start(t, localConfig(t, "n2", n1.Local().Addr))
	waitFor(t, 5*time.Second, "2 members", func() bool { return allSee([]*Cluster{n1, n2}, "n1", "n2") })
	addr := n1.Local().Addr
	if err := n1.Shutdown(); err != nil { // a crash, or a cut: n2 declares n1 dead
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "n1 declared dead", func() bool { return allSee([]*Cluster{n2}, "n2") })

	cfg := localConfig(t, "n1") // no seeds: it cannot find n2 by itself
	cfg.BindPort = port(t, addr)
	back := start(t, cfg)
	took := waitFor(t, 5*time.Second, "merged again by n2's reconnect loop", func() bool {
		return allSee([]*Cluster{back, n2}, "n1", "n2")
	})
	if budget := 3 * cfg.ReconnectInterval; took > budget {
		t.Fatalf("merged after %v, budget %v (reconnect interval %v)", took, budget, cfg.ReconnectInterval)
	}
	t.Logf("merged %v after the departed member came back (reconnect interval %v)", took, cfg.ReconnectInterval)
}

// A node that announces its departure (done draining, about to Leave) is
// seen by every member as leaving and departed, itself included.
func TestSetDeparted(t *testing.T) {
	cs := startThree(t)
	want := cs[2].Local().Meta
	if err := cs[2].SetLeaving(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := cs[2].SetDeparted(time.Second); err != nil {
		t.Fatal(err)
	}
	want.Leaving, want.Departed = true, true
	if got := cs[2].Local().Meta; got != want {
		t.Fatalf("Local().Meta = %+v, want %+v", got, want)
	}
	waitFor(t, 10*time.Second, "n3's departure seen everywhere", func() bool {
		for _, c := range cs {
			ms := c.Members()
			if len(ms) != 3 || ms[2].Meta != want {
				return false
			}
		}
		return true
	})
	if err := cs[2].Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := cs[2].SetDeparted(time.Second); !errors.Is(err, ErrShutdown) {
		t.Fatalf("SetDeparted after Shutdown: %v, want ErrShutdown", err)
	}
}

// A node whose limits changed (a config reload) publishes their new hash:
// every member sees it, the rest of its metadata unchanged.
func TestSetLimitsHash(t *testing.T) {
	cs := startThree(t)
	want := cs[1].Local().Meta
	want.LimitsHash = "0123456789abcdef"
	if err := cs[1].SetLimitsHash(want.LimitsHash, time.Second); err != nil {
		t.Fatal(err)
	}
	if got := cs[1].Local().Meta; got != want {
		t.Fatalf("Local().Meta = %+v, want %+v", got, want)
	}
	waitFor(t, 10*time.Second, "n2's new limits hash seen everywhere", func() bool {
		for _, c := range cs {
			ms := c.Members()
			if len(ms) != 3 || ms[1].Meta != want {
				return false
			}
		}
		return true
	})
}

// A reincarnated node (fenced off after a split) is seen by every member
// under its new BootID, its other metadata unchanged, and a Leaving flag
// set before survives it.
func TestReincarnate(t *testing.T) {
	cs := startThree(t)
	before := cs[2].Local()
	if err := cs[2].SetLeaving(time.Second); err != nil {
		t.Fatal(err)
	}
	boot, err := cs[2].Reincarnate(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	after := cs[2].Local()
	if boot == before.Meta.BootID || after.Meta.BootID != boot || len(boot) != len(before.Meta.BootID) {
		t.Fatalf("new boot id %q (local %q), was %q: want a new one of the same length", boot, after.Meta.BootID, before.Meta.BootID)
	}
	want := before.Meta
	want.BootID, want.Leaving = boot, true
	waitFor(t, 10*time.Second, "n3's new incarnation seen everywhere", func() bool {
		for _, c := range cs {
			ms := c.Members()
			if len(ms) != 3 || ms[2].Meta != want {
				return false
			}
		}
		return true
	})
}

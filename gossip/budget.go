package gossip

import (
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tokenring/tokenring/internal/fdreserve"
	"golang.org/x/time/rate"
)

// Defaults of the inbound stream budget (Config).
const (
	// DefaultMaxInboundStreams is Config.MaxInboundStreams's default. An
	// inbound gossip stream is a push/pull (one a PushPullInterval from
	// each member, spread over the members: about one a node every 5 s),
	// a join (a node starting contacts one seed) or a TCP fallback probe
	// (one a ProbeInterval from a member whose UDP probe went unanswered),
	// and each lasts the milliseconds of one exchange. The most a node
	// sees at once is a mass restart: every member joining through the
	// same seed. 64 covers that for clusters of 64 members (a refused join
	// is retried a JoinRetryInterval later), and costs at most 64
	// descriptors and goroutines: 6% of a 1,024-descriptor limit, where
	// memberlist alone would take them all.
	DefaultMaxInboundStreams = 64
	// DefaultInboundStreamTimeout is Config.InboundStreamTimeout's
	// default: a member's message (a push/pull state is a few hundred
	// bytes a member) arrives in milliseconds on a LAN, even from a
	// loaded host; 1 s is a hundred times that, and a tenth of the 10 s
	// memberlist would give a stranger's silent connection.
	DefaultInboundStreamTimeout = time.Second
)

// budgetTransport is memberlist's NetTransport with a budget on inbound
// TCP streams: at most max at once, each with until its accept plus
// timeout to deliver its message (memberlist reads one message an inbound
// stream, then only writes), and none accepted within the process's
// descriptor reserve. Memberlist itself has no cap and reads a stream's
// label and key only after its 10 s TCPTimeout, so idle connections alone
// could take every descriptor of the process. A stream refused is closed
// at once and counted.
type budgetTransport struct {
	*memberlist.NetTransport
	streams  chan net.Conn
	slots    chan struct{} // a token a stream being served; capacity max
	timeout  time.Duration
	reserve  *fdreserve.Reserve
	rejected atomic.Uint64
	logger   *log.Logger
	warn     rate.Sometimes
	done     chan struct{} // closed by Shutdown, after the NetTransport's
	shut     sync.Once
	wg       sync.WaitGroup
}

// newBudgetTransport listens on c's bind address and port as memberlist
// would (trying 10 ports when BindPort is 0, since the port must be free
// for both TCP and UDP) and returns the budgeted transport and the port it
// bound.
func newBudgetTransport(c Config, logger *log.Logger) (*budgetTransport, int, error) {
	nc := &memberlist.NetTransportConfig{BindAddrs: []string{c.BindAddr}, BindPort: c.BindPort, Logger: logger}
	tries := 1
	if c.BindPort == 0 {
		tries = 10
	}
	var nt *memberlist.NetTransport
	var err error
	for range tries {
		if nt, err = memberlist.NewNetTransport(nc); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("gossip transport: %w", err)
	}
	port := c.BindPort
	if port == 0 {
		port = nt.GetAutoBindPort()
	}
	t := &budgetTransport{
		NetTransport: nt,
		streams:      make(chan net.Conn),
		slots:        make(chan struct{}, c.MaxInboundStreams),
		timeout:      c.InboundStreamTimeout,
		reserve:      fdreserve.New(fdreserve.DefaultReserve),
		logger:       logger,
		warn:         rate.Sometimes{Interval: time.Second},
		done:         make(chan struct{}),
	}
	t.wg.Add(1)
	go t.admitLoop()
	return t, port, nil
}

// StreamCh is the inbound streams admitted (memberlist.Transport).
func (t *budgetTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown closes the listeners, then stops admitting (memberlist.Transport).
// In that order: the NetTransport's accept loop waits for its streams to
// be taken, and this one takes them until it has stopped. Only the first
// call does anything.
func (t *budgetTransport) Shutdown() error {
	var err error
	t.shut.Do(func() {
		err = t.NetTransport.Shutdown()
		close(t.done)
		t.wg.Wait()
	})
	return err
}

// Rejected is the number of inbound streams closed unserved: over the
// budget, or within the descriptor reserve.
func (t *budgetTransport) Rejected() uint64 { return t.rejected.Load() }

func (t *budgetTransport) admitLoop() {
	defer t.wg.Done()
	in := t.NetTransport.StreamCh()
	for {
		select {
		case c := <-in:
			t.admit(c)
		case <-t.done:
			return
		}
	}
}

// admit hands c to memberlist within the budget, or closes and counts it.
func (t *budgetTransport) admit(c net.Conn) {
	why := ""
	if t.reserve.Full(c) {
		why = "within the descriptor reserve"
	} else {
		select {
		case t.slots <- struct{}{}:
		default:
			why = "at the inbound stream budget"
		}
	}
	if why != "" {
		n := t.rejected.Add(1)
		_ = c.Close()
		t.warn.Do(func() {
			t.logger.Printf("[WARN] gossip: inbound stream from %s refused, %s (max %d); %d refused so far", c.RemoteAddr(), why, cap(t.slots), n)
		})
		return
	}
	bc := &budgetConn{Conn: c, readBy: time.Now().Add(t.timeout), release: func() { <-t.slots }}
	_ = c.SetReadDeadline(bc.readBy)
	select {
	case t.streams <- bc:
	case <-t.done:
		_ = bc.Close()
	}
}

// budgetConn is an admitted inbound stream: its reads end by readBy,
// whatever deadline memberlist sets, and closing it frees its slot (once).
type budgetConn struct {
	net.Conn
	readBy  time.Time
	release func()
	once    sync.Once
}

func (c *budgetConn) earlier(t time.Time) time.Time {
	if t.IsZero() || t.After(c.readBy) {
		return c.readBy
	}
	return t
}

// SetDeadline sets the write deadline to t and the read deadline to t or
// readBy, whichever is earlier.
func (c *budgetConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(c.earlier(t))
}

// SetReadDeadline sets the read deadline to t or readBy, whichever is
// earlier.
func (c *budgetConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.earlier(t))
}

// Close closes the connection and frees its slot.
func (c *budgetConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// Collectors returns the gossip transport's Prometheus collectors:
// tokenring_gossip_conns_rejected_total.
func (c *Cluster) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_gossip_conns_rejected_total",
			Help: "Inbound gossip TCP connections closed unserved: beyond gossip's inbound stream budget, or accepted within the descriptor reserve.",
		}, func() float64 { return float64(c.transport.Rejected()) }),
	}
}

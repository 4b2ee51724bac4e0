package peer

import (
	"log/slog"
	"sync"
)

// PoolConfig configures a Pool's clients.
type PoolConfig struct {
	// Self is this node's peer address, announced on every new connection
	// (the peer counts its frames as hearing from us); "" for none.
	Self    string
	Dial    Dialer
	Batch   BatchConfig
	Forward ForwardConfig
	Log     *slog.Logger
	Stats   *Stats // shared by every client; not nil
	// Auth, if not nil, authenticates every new connection with the first
	// cluster secret before any call is sent on it.
	Auth   *Auth
	Limits Limits
}

// Pool is a node's clients of its peers: one Client, and so one
// connection, per peer address, made on first use. Safe for concurrent use.
type Pool struct {
	cfg PoolConfig

	mu    sync.Mutex // guards peers
	peers map[string]*Client
}

// NewPool returns an empty pool.
func NewPool(cfg PoolConfig) *Pool {
	return &Pool{cfg: cfg, peers: make(map[string]*Client)}
}

// Get returns the client of the peer at addr, made on first use.
func (p *Pool) Get(addr string) *Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.peers[addr]
	if c == nil {
		c = newClient(addr, p.cfg.Dial, p.cfg.Batch, p.cfg.Forward, p.cfg.Log, p.cfg.Stats)
		c.self = p.cfg.Self
		c.auth, c.wire = p.cfg.Auth, p.cfg.Limits
		p.peers[addr] = c
	}
	return c
}

// Up reports whether the pool has a live connection to the peer at addr;
// unlike Get, it makes no client for an address it has none for.
func (p *Pool) Up(addr string) bool {
	p.mu.Lock()
	c := p.peers[addr]
	p.mu.Unlock()
	return c != nil && c.Up()
}

// Keep closes the clients of the peers whose address live does not hold.
func (p *Pool) Keep(live map[string]bool) {
	var gone []*Client
	p.mu.Lock()
	for addr, c := range p.peers {
		if !live[addr] {
			gone = append(gone, c)
			delete(p.peers, addr)
		}
	}
	p.mu.Unlock()
	for _, c := range gone {
		c.Close()
	}
}

// Close closes every client and forgets them: a client asked for after
// it is made anew.
func (p *Pool) Close() {
	p.mu.Lock()
	peers := p.peers
	p.peers = map[string]*Client{}
	p.mu.Unlock()
	for _, c := range peers {
		c.Close()
	}
}

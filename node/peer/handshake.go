package peer

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Peer authentication. With cluster secrets (NewAuth, from
// node.Config.Secrets), every peer connection starts with a handshake in
// which each end proves it holds a cluster secret, and every frame after
// it is sealed (seal.go) under keys derived for that connection alone.
// Without secrets the protocol is plaintext and unauthenticated, for
// loopback development clusters only.
//
// Why a shared secret rather than mutual TLS: the members of a cluster are
// interchangeable and already share one configuration, so one secret (two
// during a rotation) is all an operator manages: no certificate authority,
// no per-node certificates to issue, reissue or see expire in the middle of
// the night, no hostnames to match against pod IPs that change on every
// restart. The handshake is one round trip of nonces and two HMACs, built
// from the standard library (HMAC-SHA256, HKDF-SHA256, AES-256-GCM), small
// enough to read whole and to fuzz. What it gives up, knowingly: forward
// secrecy (whoever learns a secret can decrypt traffic recorded under it)
// and per-node identity (any holder of the secret is a member). A secret is
// at least 32 random bytes, so the proofs an eavesdropper sees cannot be
// brute-forced offline.
//
// The exchange (|| is concatenation):
//
//	client → server  helloC = magic || nonceC          (magic "TRP" and version 1; 32 random bytes)
//	server → client  helloS = magic || nonceS
//	client → server  HMAC-SHA256(kAuth, "tokenring peer client" || helloC || helloS)
//	server → client  HMAC-SHA256(kAuth, "tokenring peer server" || helloC || helloS)
//
// kAuth = HKDF-SHA256(secret, info "tokenring peer auth v1"). The server
// tries each of its secrets against the client's proof (hmac.Equal) and
// answers with the proof of the one that matched; it reveals nothing but a
// nonce before the client has proven itself, and an unproven client never
// reaches the frame reader. Fresh nonces on both sides make every proof
// good for one connection only; the distinct labels stop a proof from being
// reflected back. Each direction's frame key is HKDF-SHA256(secret, salt
// helloC || helloS, info "tokenring peer c2s v1" or "... s2c v1"): unique
// per connection and direction, so the frame counters never repeat a nonce.

const (
	handshakeVersion = 1
	helloLen         = 4 + 32 // magic and version, then the nonce
	proofLen         = sha256.Size
	// MinSecretLen is the shortest cluster secret New accepts, in bytes.
	MinSecretLen = 32
)

var handshakeMagic = [4]byte{'T', 'R', 'P', handshakeVersion}

// errBadProof is the server's verdict on a client whose proof matches
// none of its secrets, and the client's on a server's that does not match.
var errBadProof = errors.New("peer proof matches no cluster secret")

// clusterKey is one cluster secret and the key its proofs are made with.
type clusterKey struct {
	secret []byte
	auth   []byte // kAuth
}

// Auth holds a node's cluster secrets and runs handshakes with them.
// Nil means the plaintext, unauthenticated protocol.
type Auth struct {
	keys    []clusterKey // keys[0] is the one a client dials with
	rand    io.Reader    // nonces
	timeout time.Duration
}

// NewAuth returns the handshake of secrets, each at least MinSecretLen
// bytes, the first dialing, any accepted; nonces come from rand, and a
// handshake is bounded by timeout. No secrets: nil, the plaintext protocol.
func NewAuth(secrets [][]byte, rand io.Reader, timeout time.Duration) (*Auth, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	a := &Auth{rand: rand, timeout: timeout}
	for i, s := range secrets {
		if len(s) < MinSecretLen {
			return nil, fmt.Errorf("cluster secret %d is %d bytes, want at least %d", i, len(s), MinSecretLen)
		}
		auth, err := hkdf.Key(sha256.New, s, nil, "tokenring peer auth v1", sha256.Size)
		if err != nil {
			return nil, fmt.Errorf("cluster secret %d: %w", i, err)
		}
		a.keys = append(a.keys, clusterKey{secret: append([]byte(nil), s...), auth: auth})
	}
	return a, nil
}

// session is the frame ciphers of one authenticated connection, one per
// direction. A nil *session means a plaintext connection.
type session struct {
	send, recv *aeadStream
}

func (s *session) sender() *aeadStream {
	if s == nil {
		return nil
	}
	return s.send
}

func (s *session) receiver() *aeadStream {
	if s == nil {
		return nil
	}
	return s.recv
}

func proof(key *clusterKey, label string, transcript []byte) []byte {
	m := hmac.New(sha256.New, key.auth)
	m.Write([]byte(label))
	m.Write(transcript)
	return m.Sum(nil)
}

// newSession derives the connection's frame keys from key and the
// transcript (both hellos).
func newSession(key *clusterKey, transcript []byte, client bool) (*session, error) {
	c2s, err := hkdf.Key(sha256.New, key.secret, transcript, "tokenring peer c2s v1", 32)
	if err != nil {
		return nil, err
	}
	s2c, err := hkdf.Key(sha256.New, key.secret, transcript, "tokenring peer s2c v1", 32)
	if err != nil {
		return nil, err
	}
	cs, err := newAEADStream(c2s)
	if err != nil {
		return nil, err
	}
	sc, err := newAEADStream(s2c)
	if err != nil {
		return nil, err
	}
	if client {
		return &session{send: cs, recv: sc}, nil
	}
	return &session{send: sc, recv: cs}, nil
}

func (a *Auth) hello() ([]byte, error) {
	b := make([]byte, helloLen, 2*helloLen)
	copy(b, handshakeMagic[:])
	if _, err := io.ReadFull(a.rand, b[4:]); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	return b, nil
}

func readHello(conn net.Conn) ([]byte, error) {
	b := make([]byte, helloLen)
	if _, err := io.ReadFull(conn, b); err != nil {
		return nil, fmt.Errorf("read hello: %w", err)
	}
	if [4]byte(b[:4]) != handshakeMagic {
		return nil, fmt.Errorf("hello starts % x, want % x (a peer without Secrets, or another protocol)", b[:4], handshakeMagic[:])
	}
	return b, nil
}

// deadline bounds a handshake: HandshakeTimeout from now, or by, if
// earlier and not zero.
func (a *Auth) deadline(by time.Time) time.Time {
	d := time.Now().Add(a.timeout)
	if !by.IsZero() && by.Before(d) {
		return by
	}
	return d
}

// dial runs the client side of the handshake on conn with the first
// secret, finishing by the deadline (and by by, if not zero).
func (a *Auth) dial(conn net.Conn, by time.Time) (*session, error) {
	if err := conn.SetDeadline(a.deadline(by)); err != nil {
		return nil, err
	}
	key := &a.keys[0]
	transcript, err := a.hello()
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(transcript); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	theirs, err := readHello(conn)
	if err != nil {
		return nil, err
	}
	transcript = append(transcript, theirs...)
	if _, err := conn.Write(proof(key, "tokenring peer client", transcript)); err != nil {
		return nil, fmt.Errorf("send proof: %w", err)
	}
	got := make([]byte, proofLen)
	if _, err := io.ReadFull(conn, got); err != nil {
		return nil, fmt.Errorf("read proof (the server closes the connection when ours matches none of its secrets): %w", err)
	}
	if !hmac.Equal(got, proof(key, "tokenring peer server", transcript)) {
		return nil, errBadProof
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return newSession(key, transcript, true)
}

// accept runs the server side of the handshake on conn, accepting any of
// its secrets. It returns an error, and has sent nothing but a nonce, unless
// the client proved it holds one.
//
// The server's side is bounded by DefaultStrangerTimeout (500 ms) when
// HandshakeTimeout is longer: the connection is a stranger's until it is
// done (strangers.go), and a member's finishes in one round trip.
func (a *Auth) accept(conn net.Conn) (*session, error) {
	if err := conn.SetDeadline(time.Now().Add(min(a.timeout, DefaultStrangerTimeout))); err != nil {
		return nil, err
	}
	transcript, err := readHello(conn)
	if err != nil {
		return nil, err
	}
	ours, err := a.hello()
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(ours); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	transcript = append(transcript, ours...)
	got := make([]byte, proofLen)
	if _, err := io.ReadFull(conn, got); err != nil {
		return nil, fmt.Errorf("read proof: %w", err)
	}
	var key *clusterKey
	for i := range a.keys {
		// Every secret is tried, matched or not: the time taken does not
		// tell which one matched.
		if hmac.Equal(got, proof(&a.keys[i], "tokenring peer client", transcript)) && key == nil {
			key = &a.keys[i]
		}
	}
	if key == nil {
		return nil, errBadProof
	}
	if _, err := conn.Write(proof(key, "tokenring peer server", transcript)); err != nil {
		return nil, fmt.Errorf("send proof: %w", err)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return newSession(key, transcript, false)
}

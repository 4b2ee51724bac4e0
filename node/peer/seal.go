package peer

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// sealTag is how many bytes sealing adds to a frame: AES-256-GCM's tag.
const sealTag = 16

// aeadStream seals (or opens) the frames of one direction of one
// authenticated connection with AES-256-GCM. The nonce of the i-th frame is
// i as a 96-bit big-endian counter: each direction has a key of its own,
// derived fresh for every connection (handshake.go), so a (key, nonce)
// pair is never used twice. A frame replayed, dropped, reordered or altered
// fails to open: the receiver's counter no longer matches the sender's.
// Not safe for concurrent use: one goroutine writes a direction, one reads.
type aeadStream struct {
	aead cipher.AEAD
	seq  uint64 // the counter of the next frame
}

func newAEADStream(key []byte) (*aeadStream, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("frame cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("frame cipher: %w", err)
	}
	return &aeadStream{aead: aead}, nil
}

var errSealExhausted = errors.New("frame counter exhausted: reconnect")

func (s *aeadStream) nonce() ([12]byte, error) {
	var n [12]byte
	if s.seq == math.MaxUint64 {
		return n, errSealExhausted
	}
	binary.BigEndian.PutUint64(n[4:], s.seq)
	s.seq++
	return n, nil
}

// sealFrame encrypts the frame in b in place: b is a 4-byte header
// followed by the plaintext. It writes the sealed length into the header,
// authenticates the header as additional data, and returns the sealed
// frame (b's storage when its capacity allows).
func (s *aeadStream) sealFrame(b []byte) ([]byte, error) {
	nonce, err := s.nonce()
	if err != nil {
		return nil, err
	}
	if cap(b)-len(b) < sealTag {
		b = append(b, make([]byte, sealTag)...)[:len(b)]
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4+sealTag))
	out := s.aead.Seal(b[4:4], nonce[:], b[4:], b[:4])
	return b[:4+len(out)], nil
}

// openFrame decrypts a sealed frame body in place, given its header, and
// returns the plaintext (aliasing body).
func (s *aeadStream) openFrame(hdr, body []byte) ([]byte, error) {
	nonce, err := s.nonce()
	if err != nil {
		return nil, err
	}
	plain, err := s.aead.Open(body[:0], nonce[:], body, hdr)
	if err != nil {
		return nil, fmt.Errorf("frame %d fails authentication: %w", s.seq-1, err)
	}
	return plain, nil
}

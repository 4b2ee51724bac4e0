// Package wire is the value encoding of every message nodes exchange
// (node/peer's calls, answers and frames; custody's messages; a slice's
// grant): self-delimiting unsigned and signed varints, and strings as a
// uvarint length and bytes. Appending uses encoding/binary and
// AppendString; Reader decodes, with the first error sticking.
package wire

import (
	"encoding/binary"
	"errors"
)

// ErrShort is the error of a value cut short (or of a count beyond what
// the bytes can hold).
var ErrShort = errors.New("truncated message")

// AppendString appends s as a uvarint length and its bytes (Reader.Text).
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Reader decodes values from a byte slice; the first error sticks (Err),
// and every value read after it is zero.
type Reader struct {
	b   []byte
	err error
}

// NewReader reads b.
func NewReader(b []byte) Reader { return Reader{b: b} }

// Len is how many bytes are left to read.
func (r *Reader) Len() int { return len(r.b) }

// Err is the first error met, if any.
func (r *Reader) Err() error { return r.err }

// Fail makes err the reader's error, unless it has one already.
func (r *Reader) Fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = ErrShort
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = ErrShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Varint reads a signed varint.
func (r *Reader) Varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = ErrShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Text reads a string: a uvarint length, then that many bytes
// (AppendString).
func (r *Reader) Text() string {
	n := r.Uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = ErrShort
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// Bytes is Text for binary values: nil when empty, a copy otherwise.
func (r *Reader) Bytes() []byte {
	if s := r.Text(); s != "" {
		return []byte(s)
	}
	return nil
}

// Next returns the next n bytes as they are, aliasing the input (nil, and
// ErrShort, when fewer are left).
func (r *Reader) Next(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = ErrShort
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

package fdreserve

import (
	"net"
	"testing"
)

// wrapped is a connection wrapping another, as tokenringd's counted ones.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

func TestFullAtTheMark(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fd, ok := Descriptor(wrapped{c})
	if !ok || fd < 3 {
		t.Fatalf("Descriptor = %d, %v; want a socket's number ≥ 3", fd, ok)
	}
	for _, tc := range []struct {
		limit, reserve int
		full           bool
	}{
		{fd + 64, 64, true},  // the mark is fd itself
		{fd + 40, 41, true},  // the mark is below fd
		{fd + 65, 64, false}, // one above
		{fd + 10, 8, false},  // mark above fd
		{1 << 20, 64, false}, // far from the limit
		{fd + 64, 0, false},  // disabled
		{32, 64, false},      // limit below the reserve: disabled
	} {
		r := WithLimit(tc.limit, tc.reserve)
		if got := r.Full(wrapped{c}); got != tc.full {
			t.Errorf("limit %d reserve %d (mark %d), fd %d: Full = %v, want %v", tc.limit, tc.reserve, r.Mark(), fd, got, tc.full)
		}
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if WithLimit(4, 1).Full(p1) {
		t.Error("a pipe (no descriptor) is never within the reserve")
	}
}

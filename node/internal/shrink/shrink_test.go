package shrink

import "testing"

// A map is rebuilt once it falls below a quarter of its high-water mark,
// and not before; a small one never is.
func TestMapRebuildsBelowAQuarter(t *testing.T) {
	var h HighWater
	m := map[int]bool{}
	for i := range 1000 {
		m[i] = true
		h.Grew(len(m))
	}
	for i := range 750 {
		delete(m, i)
		if m = Map(&h, m); h.Mark() != 1000 {
			t.Fatalf("rebuilt at %d of 1000 entries", len(m))
		}
	}
	delete(m, 750)
	if m = Map(&h, m); h.Mark() != 249 || len(m) != 249 {
		t.Fatalf("at 249 of 1000: mark %d, len %d; want a rebuild", h.Mark(), len(m))
	}
	var small HighWater
	s := map[int]bool{1: true}
	small.Grew(minHWM - 1)
	if Map(&small, s); small.Mark() != minHWM-1 {
		t.Fatal("a map under minHWM was rebuilt")
	}
}

package limiter

// maxIDDraws bounds the draws from Policy.IDs for one lease id, so that a
// broken source (one returning a constant) cannot spin forever.
const maxIDDraws = 16

// newLeaseID returns an id no live lease of b holds, never 0: drawn from
// Policy.IDs if set, else (or if maxIDDraws draws all collided) the next
// free value of the sequence.
func (b *Budget) newLeaseID() uint64 {
	if ids := b.pol.IDs; ids != nil {
		for range maxIDDraws {
			if id := ids(); id != 0 && !b.hasLease(id) {
				return id
			}
		}
	}
	for {
		b.seq++
		if b.seq != 0 && !b.hasLease(b.seq) {
			return b.seq
		}
	}
}

func (b *Budget) hasLease(id uint64) bool {
	_, ok := b.leases[id]
	return ok
}

package limiter

import (
	"fmt"
	"time"
)

// CheckSnapshot accepts exactly the snapshots that RestoreBudget(data, l,
// p) restores and whose Budget passes CheckClock(now, skew), whatever p;
// for any other it returns an error wrapping ErrBadSnapshot or
// ErrFutureState. It builds no Budget: no lease map, nothing for the
// collector. A backup vets each replica it is sent with it, every
// replication round.
func CheckSnapshot(data []byte, l Limits, now time.Time, skew time.Duration) error {
	r := &snapReader{data: data}
	h, version, err := r.header()
	if err != nil {
		return err
	}
	// The bucket geometry without the counters (the window's units are
	// only range-checked), and without a lease map.
	b := &Budget{lim: l.normalize(), width: h.width, nb: uint16(h.nb), head: h.head, last: h.head*h.width + int64(h.offset)}
	for range b.ring() {
		r.units("requests")
		r.units("tokens")
	}
	r.average()
	b.seq = r.uvarint("lease sequence")
	n := r.uvarint("lease count")
	if r.err != nil {
		return r.err
	}
	if n > uint64(len(r.data)/4) { // as leases: a lease takes at least 4 bytes
		return fmt.Errorf("%w: %d leases in %d bytes", ErrBadSnapshot, n, len(r.data))
	}
	skew = min(max(skew, 0), maxDuration)
	limit := addSat(now.UnixNano(), int64(skew))
	expLimit := addSat(limit, int64(b.lim.LeaseTTL))
	var prev uint64
	future := -1 // the first lease expiring beyond expLimit; -1: none
	for i := uint64(0); i < n; i++ {
		id, ls, _, ok := r.lease(b, prev, version)
		if !ok {
			break
		}
		prev = id
		if ls.expiry > expLimit && future < 0 {
			future = int(i)
		}
	}
	if version == snapshotV4 {
		r.spend(b) // with no lease map: the ids are only range-checked
	}
	if r.err == nil && len(r.data) > 0 {
		r.fail("%d trailing bytes", len(r.data))
	}
	if r.err != nil {
		return r.err
	}
	if b.last > limit {
		return fmt.Errorf("%w: latest time %s is %s ahead of now %s (max clock skew %s)",
			ErrFutureState, time.Unix(0, b.last).UTC().Format(time.RFC3339), time.Duration(b.last-limit)+skew, now.UTC().Format(time.RFC3339), skew)
	}
	if future >= 0 {
		return fmt.Errorf("%w: lease %d of the snapshot expires beyond now %s + lease TTL %s + max clock skew %s",
			ErrFutureState, future, now.UTC().Format(time.RFC3339), b.lim.LeaseTTL, skew)
	}
	return nil
}

// SnapshotTime returns the latest time the Budget a snapshot was taken of
// had seen: every change to a Budget (an admission, a settle, a slot
// freed) brings it to its time first, and that time never goes back, so of
// two snapshots of one key's state the later one was taken no earlier. It
// reads only the snapshot's header; an error wraps ErrBadSnapshot.
func SnapshotTime(data []byte) (time.Time, error) {
	h, _, err := (&snapReader{data: data}).header()
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, h.head*h.width+int64(h.offset)), nil
}

package limiter

import (
	"errors"
	"testing"
	"time"
)

// restoreAndCheck is what CheckSnapshot must agree with.
func restoreAndCheck(data []byte, l Limits, p *Policy, now time.Time, skew time.Duration) error {
	b, err := RestoreBudget(data, l, p)
	if err != nil {
		return err
	}
	return b.CheckClock(now, skew)
}

// checkAgrees fails t unless CheckSnapshot accepts data exactly when
// RestoreBudget and CheckClock do, with an error of the same kind.
func checkAgrees(t *testing.T, data []byte, l Limits, now time.Time, skew time.Duration) {
	t.Helper()
	for _, p := range []*Policy{nil, pol10, {Buckets: 7}} {
		want := restoreAndCheck(data, l, p, now, skew)
		got := CheckSnapshot(data, l, now, skew)
		if (got == nil) != (want == nil) || errors.Is(got, ErrBadSnapshot) != errors.Is(want, ErrBadSnapshot) ||
			errors.Is(got, ErrFutureState) != errors.Is(want, ErrFutureState) {
			t.Fatalf("%x at %s (skew %s, policy %+v): CheckSnapshot says %v, RestoreBudget+CheckClock %v", data, now, skew, p, got, want)
		}
	}
}

// CheckSnapshot accepts and rejects what RestoreBudget followed by
// CheckClock does: sample snapshots, every truncation of them, and clocks
// before, at and after their times.
func TestCheckSnapshotAgreesWithRestore(t *testing.T) {
	accepted, future, leaseFuture := 0, 0, 0
	v2, v3 := newerSnapshots(t)
	for _, data := range append(sampleSnapshots(t), append(v2, v3...)...) {
		for _, now := range []time.Time{at(-time.Hour), at(0), at(10 * sec), at(time.Hour), time.Unix(-200, 0)} {
			for _, skew := range []time.Duration{0, time.Second, time.Minute} {
				checkAgrees(t, data, snapLimits, now, skew)
				if err := CheckSnapshot(data, snapLimits, now, skew); err == nil {
					accepted++
				} else if errors.Is(err, ErrFutureState) {
					future++
				}
			}
		}
		for n := range data {
			checkAgrees(t, data[:n], snapLimits, at(time.Hour), time.Minute)
		}
		checkAgrees(t, append(data, 0), snapLimits, at(time.Hour), time.Minute)
		// Restored under a shorter lease TTL, leases may expire beyond
		// now + skew + TTL while the window's time does not lie ahead.
		short := snapLimits
		short.LeaseTTL = sec
		for _, now := range []time.Time{at(4 * sec), at(15 * sec), at(20 * sec), at(time.Hour)} {
			checkAgrees(t, data, short, now, 0)
			if err := CheckSnapshot(data, short, now, 0); err != nil && errors.Is(err, ErrFutureState) && restoreAndCheck(data, snapLimits, nil, now, 0) == nil {
				leaseFuture++
			}
		}
	}
	if accepted == 0 || future == 0 || leaseFuture == 0 {
		t.Fatalf("%d accepted, %d future-dated, %d by a lease alone: the cases miss one side", accepted, future, leaseFuture)
	}
}

// FuzzCheckSnapshot: on any bytes, CheckSnapshot agrees with RestoreBudget
// followed by CheckClock.
func FuzzCheckSnapshot(f *testing.F) {
	v2, v3 := newerSnapshots(f)
	for _, s := range append(sampleSnapshots(f), append(v2, v3...)...) {
		f.Add(s, int64(0))
		f.Add(s, int64(-3600))
	}
	f.Add([]byte{1, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, int64(0))
	f.Fuzz(func(t *testing.T, data []byte, offset int64) {
		checkAgrees(t, data, snapLimits, at(time.Duration(offset)*time.Second), time.Minute)
	})
}

package custody

import (
	"fmt"
	"testing"
)

// pinnedSeeds are simulation seeds that each break an invariant when one
// fix in machine.go is reverted: the first failing seed among the first
// 20,000 when that fix alone was taken out. They pass with every fix in.
// TestCustodySim would catch these regressions too, but only if a later
// change to the simulation kept steering some seed down the same path;
// these run in milliseconds and keep the exact scenarios.
//
// Re-pinned when the simulation gained replication, long splits with the
// quorum, fences and debts, and restarting seats: its random choices
// changed, so every seed's path did, and each fix was taken out again to
// find its new first failing seed. One seed can pin several fixes.
//
// Two fixes have no seed. Installing an offer from a member the taker's
// view does not show yet (offered, "if m.gone[msg.From]"): such offers
// arrive in most seeds, but dropping them was caught in none of the first
// 100,000 (before the re-pin; none of the first 20,000 since): the giver
// resends until the taker's view catches up, so it only delays handovers,
// and the one case where it loses state (the giver crashes first) the
// checker accounts as a crash's legitimate loss. And hearing of a member
// custody was given to that the round's view does not show yet (Step,
// MsgInfo, "m.heard[msg.GaveTo] = m.now"), pinned at 17757 before: none
// of the first 120,000 seeds fails without it now, probably because a
// process's machine now starts with its first view: a joiner holding a
// partition has by then asked the members of its view, the waiter among
// them, for the partitions it owns, and the waiter knows of it from that.
var pinnedSeeds = []struct {
	seed uint64
	bug  string
}{
	{0, "implicit ack: custody coming back to a giver whose acknowledgement was lost finds it still holding its old copy (a conflict)"},
	{245, "doubt: a giver whose taker died ignores replies showing its offer was installed, keeps its stale copy in doubt beside the live holder, and never rests"},
	{0, "replies in doubt: a giver in doubt ignores the replies to its own pull round, never settles, and its partition never rests"},
	{1427, "unknown joiners: a waiter's pull round skips a joiner its view does not show yet and restores from nothing while the joiner holds the partition"},
	{32, "news cannot revive a member: a forgotten dead member comes back with each reply naming it, so the owner's pull rounds wait on it for ever"},
	{0, "the ack rule: a giver dropping its state when it offers loses the partition when the offer is lost"},
}

func TestCustodySimPinnedSeeds(t *testing.T) {
	for _, c := range pinnedSeeds {
		t.Run(fmt.Sprint(c.seed), func(t *testing.T) {
			if s := runSim(c.seed, false); s.failure != "" {
				// Runs are deterministic: the replay fails the same way,
				// with a trace.
				t.Errorf("seed %d, pinned for %s: %s", c.seed, c.bug, runSim(c.seed, true).failure)
			}
		})
	}
}

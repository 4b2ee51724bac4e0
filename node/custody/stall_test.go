package custody

import (
	"fmt"
	"testing"

	"github.com/tokenring/tokenring/ring"
)

// Stalls in the custody simulation: a process stops (SIGSTOP, a long GC
// pause, a frozen VM) and runs nothing for a while: it sends, hears and
// decides nothing, and what reaches it waits in its socket buffers. Past
// failure detection (simDetect) the others' views drop it and restore its
// partitions; its own gossip sees no change. When it wakes, memberlist
// refutes its death under the same boot id and the others' views show it
// again. The shell's rule (Node.stalled, applied when stallRule is set): a
// process that stalled at least as long as failure detection fences itself
// as a minority does (owing what it counted beyond its backups'
// acknowledged copies, the copies the others restored from) and rejoins as
// a new member. Without the rule it decides again on the state it held,
// beside the member that restored the partition: two writers.

// stalled reports whether pr runs nothing at tick now.
func (pr *simProc) stalled(now int64) bool { return now < pr.stallUntil }

// stalledAway reports whether pr is stalled and the others have declared
// it dead: their views no longer show it.
func (s *sim) stalledAway(pr *simProc) bool {
	return pr.stalled(s.now) && s.now >= pr.stallFrom+simDetect
}

// stall stops pr for a random time, as often shorter as longer than
// failure detection.
func (s *sim) stall(pr *simProc) {
	pr.stallFrom, pr.stallUntil = s.now, s.now+1+int64(s.rng.IntN(4*simDetect))
	s.logf("stall %s until %d", pr.inc.id, pr.stallUntil)
	if pr.stallUntil-pr.stallFrom > simDetect {
		s.detect = append(s.detect, s.now+simDetect) // the others' views drop it then
	}
}

// wake resumes the processes whose stall ends now.
func (s *sim) wake() {
	for _, pr := range s.procs {
		if !pr.alive || pr.stallUntil != s.now {
			continue
		}
		long := pr.stallUntil-pr.stallFrom >= simDetect
		s.logf("wake %s after %d ticks", pr.inc.id, pr.stallUntil-pr.stallFrom)
		// Node.stalled: a process its gossip shows alone carries on.
		switch {
		case !long || !s.stallRule || len(s.liveProcs()) < 2:
		case pr.inc.alive:
			s.stallFence = true
			s.fence(pr, simView{members: []Member{{Member: ring.Member{Name: pr.name}}}})
			s.stallFence = false
		default:
			s.abandon(pr)
		}
		s.publish(false) // its gossip refutes its death: the others see it again
	}
}

// runStallSim runs one seed with stalls, the rule applied or not.
func runStallSim(seed uint64, tracing, rule bool) *sim {
	return runSimWith(seed, tracing, func(s *sim) { s.stalls, s.stallRule = true, rule })
}

// TestCustodySimStalls runs seeds with stalls, and the shell's rule.
// Stalls come with joins, graceful leaves, reshuffles, cuts and splits,
// not crashes: a stall past failure detection looks like a crash to the
// others, and the checker does not yet tell the losses of a stall combined
// with a crash (of the stalled member's backup, say) from those the rule
// should prevent.
func TestCustodySimStalls(t *testing.T) {
	n := *simSeeds / 5
	if testing.Short() || raceEnabled {
		n /= 10
	}
	var sum simStats
	for seed := range uint64(n) {
		s := runStallSim(seed, false, true)
		if s.failure != "" {
			t.Fatalf("seed %d (replay: go test -run TestCustodySimStallSeed -sim.seed=%d ./node/): %s", seed, seed, runStallSim(seed, true, true).failure)
		}
		sum.add(s.stats)
	}
	t.Logf("%d seeds with stalls: %d admissions checked, %d fences, %d restores", n, sum.admitted, sum.fences, sum.restores)
	if !strict("stalls") {
		t.Logf("known gap (sim.strict): %d admissions dropped by stall fences relying on a copy no restore read (stalls)", sum.lostStall)
	}
	if sum.admitted == 0 || sum.fences == 0 || sum.restores == 0 {
		t.Fatal("the stall simulation admitted, fenced or restored nothing: it checks nothing")
	}
}

// TestCustodySimStallSeed replays one seed with stalls and a trace:
// go test -run TestCustodySimStallSeed -sim.seed=N ./node/custody/
func TestCustodySimStallSeed(t *testing.T) {
	if *simSeed < 0 {
		t.Skip("no -sim.seed given")
	}
	if s := runStallSim(uint64(*simSeed), true, true); s.failure != "" {
		t.Fatal(s.failure)
	}
}

// stallSeed is the first seed whose run breaks an invariant without the
// stall rule: the defect (a stalled owner returns under the same
// boot id and decides on the state it held while another member restored
// its partitions). With the rule it passes.
const stallSeed = 2

func TestCustodySimPinnedStall(t *testing.T) {
	if s := runStallSim(stallSeed, false, false); s.failure == "" {
		t.Fatalf("seed %d passes without the stall rule: it no longer reproduces the returning stalled owner", stallSeed)
	} else {
		t.Logf("without the rule: %s", s.failure)
	}
	if s := runStallSim(stallSeed, false, true); s.failure != "" {
		t.Fatal(fmt.Sprintf("seed %d with the stall rule: %s", stallSeed, runStallSim(stallSeed, true, true).failure))
	}
}

// stalling reports whether some live process is stalled now.
func (s *sim) stalling() bool {
	for _, pr := range s.procs {
		if pr.alive && pr.stalled(s.now) {
			return true
		}
	}
	return false
}

// abandon gives up pr's incarnation that has no machine running (fenced
// and waiting to rejoin, or not started): the others may have declared it
// dead while it stalled, so it comes back as another.
func (s *sim) abandon(pr *simProc) {
	old := pr.inc
	for _, c := range old.waiting {
		s.fallBack(c)
	}
	old.waiting, old.fenced = nil, true
	s.retired = append(s.retired, old)
	if pr.fencedID == "" {
		pr.fencedID = old.id
	}
	pr.inc = s.incarnate(pr)
	s.logf("%s given up after a stall; comes back as %s", old.id, pr.inc.id)
}

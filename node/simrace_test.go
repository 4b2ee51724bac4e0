//go:build race

package node

// raceEnabled: the race detector slows the simulation tenfold, so under it
// TestSim runs a twentieth of its seeds; make test runs 2,000 without it.
const raceEnabled = true

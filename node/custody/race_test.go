//go:build race

package custody

// raceEnabled: the race detector slows the simulation tenfold, so under it
// TestCustodySim runs a tenth of its seeds; make test runs all of them
// without it too.
const raceEnabled = true

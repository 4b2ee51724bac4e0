//go:build !race

package prompt

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false

//go:build race

package frontdoor

const raceEnabled = true

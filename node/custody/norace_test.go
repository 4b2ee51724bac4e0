//go:build !race

package custody

const raceEnabled = false

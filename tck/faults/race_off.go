//go:build !race

package faults

// raceEnabled: built without -race.
const raceEnabled = false

//go:build race

package faults

// raceEnabled: built with -race.
const raceEnabled = true

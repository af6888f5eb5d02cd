//go:build !race

package flow_test

// raceEnabled: built without -race.
const raceEnabled = false

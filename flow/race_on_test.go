//go:build race

package flow_test

// raceEnabled: built with -race, under which a sync.Pool drops a quarter
// of what is put back (so allocation counts are not the product's).
const raceEnabled = true

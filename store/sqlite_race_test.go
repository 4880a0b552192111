//go:build race

package store_test

// raceSlowdown is how much slower the race detector makes the state's
// queries: timing bounds meant for the real binary are scaled by it.
const raceSlowdown = 4

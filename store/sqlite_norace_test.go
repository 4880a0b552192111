//go:build !race

package store_test

// raceSlowdown is 1 without the race detector (see sqlite_race_test.go).
const raceSlowdown = 1

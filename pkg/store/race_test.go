//go:build race

package store

// raceEnabled: the race detector slows hashing loops and inflates memory,
// so size-sensitive tests shrink or skip under it.
const raceEnabled = true

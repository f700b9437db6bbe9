//go:build race

package plugin

// raceEnabled: the race detector keeps shadow memory for what the host
// touches of a module's linear memory, so RSS bounds do not hold under it.
const raceEnabled = true

//go:build race

package engine

// raceEnabled: the race detector multiplies the Go side of generation
// (sampling, masks) several times; long loops run fewer rounds under it.
const raceEnabled = true

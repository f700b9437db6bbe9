// Package power finds the power, energy, thermal and frequency sensors a
// board exposes, samples them on absolute deadlines with their files kept
// open, integrates energy (counter deltas, wrap-safe, or trapezoids over
// timestamped power), subtracts an idle baseline, attributes energy to
// requests, and reports it all with the sensor's scope.
//
// It never makes a number up: where no sensor exists, energy is null and
// the report lists every source probed and why it is unavailable.
//
// Sensors are read through an fs.FS rooted at "/" (os.DirFS("/") in
// production), so every prober is tested on fixture trees in testdata/.
package power

//go:build !nvml

package power

// probeNVML reports that this build has no NVML support: it needs cgo and
// the build tag nvml (go build -tags nvml).
func probeNVML(p *Probed) {
	p.unavailable("nvml", "", ErrNotBuilt.Error())
}

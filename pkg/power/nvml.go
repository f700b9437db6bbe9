//go:build nvml

package power

import (
	"context"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlSource reads one NVIDIA GPU: the total energy counter (mJ, Volta
// and later) when supported, otherwise the instantaneous power (mW). It
// holds one NVML initialisation, released by Close.
type nvmlSource struct {
	info   Info
	dev    nvml.Device
	energy bool
	c      counter
	closed bool
}

// probeNVML initialises NVML (it dlopens libnvidia-ml lazily and fails
// cleanly without a driver). A device whose power calls return
// NOT_SUPPORTED — every Jetson — has no sensor here, never 0 W.
func probeNVML(p *Probed) {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		p.unavailable("nvml", "", "init: "+nvml.ErrorString(ret))
		return
	}
	defer nvml.Shutdown()
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS || n == 0 {
		p.unavailable("nvml", "", fmt.Sprintf("no device (%s)", nvml.ErrorString(ret)))
		return
	}
	for i := range n {
		dev, ret := nvml.DeviceGetHandleByIndex(i)
		src := fmt.Sprintf("nvml gpu%d", i)
		if ret != nvml.SUCCESS {
			p.unavailable(src, "", nvml.ErrorString(ret))
			continue
		}
		if name, ret := dev.GetName(); ret == nvml.SUCCESS {
			src = fmt.Sprintf("nvml gpu%d %s", i, name)
		}
		s := &nvmlSource{info: Info{Name: src, Scope: ScopeGPU}, dev: dev}
		if _, ret := dev.GetTotalEnergyConsumption(); ret == nvml.SUCCESS {
			s.energy, s.info.Method = true, CounterDelta
		} else if _, ret2 := dev.GetPowerUsage(); ret2 == nvml.SUCCESS {
			s.info.Method = Trapezoid
		} else {
			p.unavailable(src, "", "power: "+nvml.ErrorString(ret2)+" (no sensor)")
			continue
		}
		if ret := nvml.Init(); ret != nvml.SUCCESS { // held until the source is closed
			p.unavailable(src, "", "init: "+nvml.ErrorString(ret))
			continue
		}
		p.Sources = append(p.Sources, s)
	}
}

func (s *nvmlSource) Info() Info { return s.info }

func (s *nvmlSource) Read(context.Context) (Reading, error) {
	if s.energy {
		mj, ret := s.dev.GetTotalEnergyConsumption()
		if ret != nvml.SUCCESS {
			s.c.lost()
			return Reading{}, fmt.Errorf("%s: energy: %s: %w", s.info.Name, nvml.ErrorString(ret), ErrUnavailable)
		}
		gap := s.c.add(mj * 1000)
		return Reading{EnergyUJ: s.c.total, Gap: gap}, nil
	}
	mw, ret := s.dev.GetPowerUsage()
	if ret != nvml.SUCCESS {
		return Reading{}, fmt.Errorf("%s: power: %s: %w", s.info.Name, nvml.ErrorString(ret), ErrUnavailable)
	}
	return Reading{PowerW: float64(mw) / 1000}, nil
}

func (s *nvmlSource) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if ret := nvml.Shutdown(); ret != nvml.SUCCESS {
		return errors.New("power: nvml shutdown: " + nvml.ErrorString(ret))
	}
	return nil
}

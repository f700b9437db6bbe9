package power_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/edgeinfer/edgeinfer/pkg/power"
)

// Probe a Jetson Orin Nano's sensor tree (a fixture here; os.DirFS("/")
// on a device) and list its sources with their scopes.
func ExampleProbe() {
	p := power.Probe(context.Background(), os.DirFS("testdata/jetson-orin-nano"), power.ProbeOptions{})
	defer p.Close()
	for _, s := range p.Sources {
		fmt.Println(s.Info().Name, s.Info().Scope)
	}
	primary, _ := p.Primary()
	fmt.Println("primary:", primary.Info().Name)
	// Output:
	// jetson-ina3221 VDD_CPU_GPU_CV rail
	// jetson-ina3221 VDD_IN board_input
	// jetson-ina3221 VDD_SOC rail
	// primary: jetson-ina3221 VDD_IN
}

// With no sensor (a Raspberry Pi 5 has none), energy is null and the
// report says why.
func ExampleSampler_Report() {
	p := power.Probe(context.Background(), os.DirFS("testdata/rpi5"), power.ProbeOptions{})
	s := power.NewSampler(p, power.SamplerOptions{})
	defer s.Close()
	now := time.Now()
	r := s.Report(power.Span{Start: now, End: now.Add(time.Minute)}, power.Span{}, power.Span{})
	fmt.Println("energy_j nil:", r.EnergyJ == nil)
	for _, u := range r.UnavailableReasons {
		if u.Source == "hwmon" {
			fmt.Println(u.Source+":", u.Reason)
		}
	}
	// Output:
	// energy_j nil: true
	// hwmon: no power, energy or voltage×current channel in hwmon devices: cpu_thermal, rpi_volt
}

// Split each step's energy among its requests by token share; the parts
// add up to the measured total exactly.
func ExampleAttribute() {
	a := power.Attribute([]power.Step{
		{EnergyUJ: 1000, Shares: []power.StepShare{{Request: 1, Tokens: 1}, {Request: 2, Tokens: 2}}},
	})
	fmt.Println(a.Method, a.PerRequestUJ[1], a.PerRequestUJ[2])
	// Output: token_share_per_step_largest_remainder_uj 333 667
}

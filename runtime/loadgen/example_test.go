package loadgen_test

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/runtime/loadgen"
)

func ExampleParseSpec() {
	spec, err := loadgen.ParseSpec([]byte(`
name: voice
slo: {preset: voice-agent}
input: {kind: fixed, value: 32}
output: {kind: uniform, min: 8, max: 24}
phases:
  - {name: baseline, kind: baseline, duration: 10s, arrival: {mode: poisson, rate: 0}}
`))
	fmt.Println(err)
	spec, err = loadgen.ParseSpec([]byte(`
name: voice
slo: {preset: voice-agent}
input: {kind: fixed, value: 32}
output: {kind: uniform, min: 8, max: 24}
phases:
  - {name: baseline, kind: baseline, duration: 10s, arrival: {mode: poisson, rate: 2}}
`))
	fmt.Println(err, spec.Class, spec.SLO.TTFT.D(), spec.Thresholds[0])
	// Output:
	// loadgen: invalid spec: phases[0].arrival.rate: must be > 0
	// <nil> realtime 150ms ttft_ms.p99 ≤ 150
}

package power

// Scope says what a power source measures. Energies of different scopes
// are never added together.
type Scope string

// Scopes, widest first.
const (
	ScopeWall       Scope = "wall"        // at the socket (smart plug)
	ScopeBoardInput Scope = "board_input" // the board's input rail (Jetson VDD_IN)
	ScopeModule     Scope = "module"      // a compute module or SoC platform (RAPL psys, summed rails)
	ScopeCPUPackage Scope = "cpu_package" // CPU package(s) (RAPL package-N)
	ScopeGPU        Scope = "gpu"         // a discrete or integrated GPU (NVML, amdgpu)
	ScopeRail       Scope = "rail"        // one supply rail
)

// rank orders scopes from widest (0) to narrowest.
func (s Scope) rank() int {
	switch s {
	case ScopeWall:
		return 0
	case ScopeBoardInput:
		return 1
	case ScopeModule:
		return 2
	case ScopeCPUPackage:
		return 3
	case ScopeGPU:
		return 4
	default:
		return 5
	}
}

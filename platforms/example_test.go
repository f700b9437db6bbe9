package platforms_test

import (
	"fmt"

	"github.com/edgeinfer/edgeinfer/platforms"
	"github.com/edgeinfer/edgeinfer/runtime/engine"
)

// Detect a board from a fixture tree (on a device: the zero DetectOptions
// read "/") and apply its plan to an engine configuration.
func Example() {
	p, err := platforms.Detect(platforms.DetectOptions{Root: "testdata/rk3588"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Board, "-", p.Name)
	fmt.Println("providers:", platforms.ProviderNames(p.Providers))
	fmt.Println("threads:", p.Threads.IntraOp, "on CPUs", p.Threads.CPUs)

	cfg := engine.Config{KV: engine.KVOptions{BudgetBytes: 512 << 20}} // an explicit budget is kept
	for _, c := range platforms.Apply(p, &cfg) {
		fmt.Println(c)
	}
	// Output:
	// rk3588 - Radxa ROCK 5B
	// providers: CPU
	// threads: 4 on CPUs [4 5 6 7]
	// board: rk3588 (profile)
	// providers: CPU (profile)
	// intra_op_threads: 4 (profile)
	// thread_affinity: 6;7;8 (profile)
	// kv_budget_bytes: 536870912 (config; profile: 2147483648)
}

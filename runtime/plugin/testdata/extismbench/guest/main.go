// Command guest is the smallest Extism plugin: an exported function that
// returns 0 without reading its input (Extism's Go PDK is not on the module
// proxy here; a function that needs no host call does not need it).
package main

//go:wasmexport run
func run() int32 { return 0 }

func main() {}

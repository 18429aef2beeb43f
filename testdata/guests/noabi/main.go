// Command noabi is a valid wasip1 reactor module with one export and no
// ABI version marker (and no SDK), so that tests can check the host refuses
// it at upload.
package main

//go:wasmexport add
func add(a, b int32) int32 { return a + b }

func main() {}

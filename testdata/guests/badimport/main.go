// Command badimport imports a function no wasmkeep host provides
// (env.nonexistent), so that tests can check the host refuses the module at
// upload with an error naming the import. The handler calls it so that the
// linker keeps the import.
package main

import (
	"strconv"

	wk "github.com/wasmkeep/wasmkeep/guest-sdk/go"
)

//go:wasmimport env nonexistent
func nonexistent() int32

func init() {
	wk.HandleRequest(func(*wk.Request) *wk.Response {
		return wk.Text(200, strconv.Itoa(int(nonexistent())))
	})
}

func main() {}

package calls

import (
	"maps"
	"slices"

	"github.com/wasmkeep/wasmkeep/abi"
)

// Outcome names a call's answer as the metrics of calls label it: "ok",
// or what its error's status says ("not_found", "refused", "timeout",
// ...). Rooms and fronts count the calls they make by it.
func Outcome(r Result) string {
	if r.Err == nil {
		return "ok"
	}
	return outcomeNames[r.Err.Status]
}

// Outcomes are every name Outcome gives, "ok" first, for metrics to
// register up front.
func Outcomes() []string {
	return append([]string{"ok"}, slices.Sorted(maps.Values(outcomeNames))...)
}

var outcomeNames = map[abi.Status]string{
	abi.StatusNotFound: "not_found", abi.StatusRefused: "refused", abi.StatusTimeout: "timeout",
	abi.StatusCrashed: "crashed", abi.StatusCycle: "cycle", abi.StatusTooDeep: "too_deep",
	abi.StatusTooLarge: "too_large", abi.StatusTooMany: "too_many",
}

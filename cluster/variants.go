package cluster

import "fmt"

// Variants are the protocol's rules that the simulation breaks, one at a
// time, to show that its checks would catch the bug (seed 000,
// Verification; issue 11). Each true field replaces one rule by the
// broken version its comment names.
type Variants struct {
	// AcquireLive takes a record that names another instance whether or
	// not that instance is known to be dead.
	AcquireLive bool
	// ResolverEndsUnchanged ends an unresolved acquisition at the first
	// read that finds its record unchanged, instead of watching it for
	// ResolveWindow: a write that lands after that read leaks.
	ResolverEndsUnchanged bool
	// ReleaseUnconditional writes "free" without If-Match: a late or
	// retried release frees a record another hold has since taken.
	ReleaseUnconditional bool
	// ValidityFromAnswer counts the lease's validity from the arrival of
	// a renewal's answer instead of the renewal's send time.
	ValidityFromAnswer bool
}

// VariantNames are the names the simulation's tests switch Variants on
// by.
var VariantNames = []string{"AcquireLive", "ResolverEndsUnchanged", "ReleaseUnconditional", "ValidityFromAnswer"}

// Variant returns the Variants with the one of that name switched on.
func Variant(name string) (Variants, error) {
	var v Variants
	switch name {
	case "AcquireLive":
		v.AcquireLive = true
	case "ResolverEndsUnchanged":
		v.ResolverEndsUnchanged = true
	case "ReleaseUnconditional":
		v.ReleaseUnconditional = true
	case "ValidityFromAnswer":
		v.ValidityFromAnswer = true
	case "":
	default:
		return v, fmt.Errorf("cluster: no variant %q (have %v)", name, VariantNames)
	}
	return v, nil
}

// phase is where a node is in its life.

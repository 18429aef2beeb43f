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
	// ValidityPastGrace counts the lease valid until TTL + Grace after
	// the renewal's send, instead of TTL − Safety: past the point where a
	// peer may fence it.
	ValidityPastGrace bool

	// The parked records' (seed 000, socket home):

	// WakeReadopts wakes a parked room by taking its parked hold back,
	// without writing: the wake shares the parked hold's generation.
	WakeReadopts bool
	// LapseForgetsParked ends the parked records on a lapse without
	// making them pending releases: they leak.
	LapseForgetsParked bool
	// ResolverParkedAnyGeneration takes a landed acquisition for the
	// parked hold's own whatever its generation, and does not release it.
	ResolverParkedAnyGeneration bool
	// UnknownDropsParked drops the parked entry when the wake's write has
	// no answer: if it did not land, nothing here releases the record.
	UnknownDropsParked bool
	// ParkWhileDraining parks a hold while the node drains: a drain pass
	// that ran before leaves the record naming the draining node.
	ParkWhileDraining bool
}

// VariantNames are the names the simulation's tests switch Variants on
// by.
var VariantNames = []string{"AcquireLive", "ResolverEndsUnchanged", "ReleaseUnconditional", "ValidityFromAnswer", "ValidityPastGrace"}

// ParkVariantNames are the variants of the parked records, which a
// simulation with sockets catches.
var ParkVariantNames = []string{"WakeReadopts", "LapseForgetsParked", "ResolverParkedAnyGeneration", "UnknownDropsParked", "ParkWhileDraining"}

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
	case "ValidityPastGrace":
		v.ValidityPastGrace = true
	case "ParkWhileDraining":
		v.ParkWhileDraining = true
	case "WakeReadopts":
		v.WakeReadopts = true
	case "LapseForgetsParked":
		v.LapseForgetsParked = true
	case "ResolverParkedAnyGeneration":
		v.ResolverParkedAnyGeneration = true
	case "UnknownDropsParked":
		v.UnknownDropsParked = true
	case "":
	default:
		return v, fmt.Errorf("cluster: no variant %q (have %v and %v)", name, VariantNames, ParkVariantNames)
	}
	return v, nil
}

// phase is where a node is in its life.

package cluster

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

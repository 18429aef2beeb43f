package member

import "fmt"

// Variants break the member's rules on purpose, one at a time, as
// cluster.Variants do the core's, so that the simulation shows its checks
// catch each break. Servers leave it zero.
type Variants struct {
	// Bounce forwards an event forwarded here that is not here once more,
	// instead of refusing it (the hop rule).
	Bounce bool
	// DrainUntold drains (hands rooms over) without telling the core,
	// which then goes on taking and parking rooms.
	DrainUntold bool
	// ReleaseOnHibernation releases the hold of a room that goes idle
	// with sockets open here, instead of parking it: its next event may
	// wake it on another node, away from its sockets.
	ReleaseOnHibernation bool
	// GiveUpKeepsSockets leaves a room's sockets open when its move ends
	// unfinished: they stay on a node that neither holds nor parks the
	// room, which another node then takes.
	GiveUpKeepsSockets bool
	// SweepReleasesParkedInPass lists the sockets before the parked set
	// in the sweep (taking the listing of the pass before): a room that
	// parked in between is released with its socket open.
	SweepReleasesParkedInPass bool
	// DrainedWithParked reports a drain drained with parked records left
	// (and does not release them on its passes).
	DrainedWithParked bool
	// SweepClosesParked has the sweep close the sockets of a room this
	// node parks.
	SweepClosesParked bool
	// MoveAfterUnlandedRelease ends a move as done after its parked
	// record's release did not land, the record still naming this node.
	MoveAfterUnlandedRelease bool
	// CallRetriedAfterRun sends a call again after it reached a node and
	// got no answer, as if it had not been sent: it may run twice.
	CallRetriedAfterRun bool
	// CallWithoutDeadline sends a call to another node without its
	// deadline, which then serves it after its caller gave up.
	CallWithoutDeadline bool
	// CycleCheckOff makes calls without checking their chain: a call
	// back into a room that waits on the chain runs in it.
	CycleCheckOff bool
	// AlarmIndexDroppedOnMove deletes a room's alarm index entries when a
	// move hands it over, as if the index were the source's: an alarm
	// whose room is not woken on the target before its node goes is lost.
	AlarmIndexDroppedOnMove bool
}

// VariantNames are the names of Variants' fields.
var VariantNames = []string{"Bounce", "DrainUntold", "ReleaseOnHibernation", "GiveUpKeepsSockets",
	"SweepReleasesParkedInPass", "DrainedWithParked", "SweepClosesParked", "MoveAfterUnlandedRelease",
	"CallRetriedAfterRun", "CallWithoutDeadline", "CycleCheckOff", "AlarmIndexDroppedOnMove"}

// Variant returns the Variants with the one of that name switched on.
func Variant(name string) (Variants, error) {
	var v Variants
	switch name {
	case "Bounce":
		v.Bounce = true
	case "DrainUntold":
		v.DrainUntold = true
	case "ReleaseOnHibernation":
		v.ReleaseOnHibernation = true
	case "GiveUpKeepsSockets":
		v.GiveUpKeepsSockets = true
	case "SweepReleasesParkedInPass":
		v.SweepReleasesParkedInPass = true
	case "DrainedWithParked":
		v.DrainedWithParked = true
	case "SweepClosesParked":
		v.SweepClosesParked = true
	case "MoveAfterUnlandedRelease":
		v.MoveAfterUnlandedRelease = true
	case "CallRetriedAfterRun":
		v.CallRetriedAfterRun = true
	case "CallWithoutDeadline":
		v.CallWithoutDeadline = true
	case "CycleCheckOff":
		v.CycleCheckOff = true
	case "AlarmIndexDroppedOnMove":
		v.AlarmIndexDroppedOnMove = true
	default:
		return v, fmt.Errorf("member: no variant %q (have %v)", name, VariantNames)
	}
	return v, nil
}

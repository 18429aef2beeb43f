// Package limits is the one convention every Config of wasmkeep follows
// for its limits and timings (docs/architecture.md, "Conventions"):
//
//   - each default is an exported constant Default<Field> of the package
//     that owns the field;
//   - a zero field means that default, so a zero Config is a valid one;
//   - a limit that can be turned off is turned off by Off (any negative
//     value counts as Off); a field that cannot be turned off reads a
//     negative value as zero, its default.
//
// The command line keeps its own spelling, where 0 means "no limit" for
// the flags that say so, and maps it to Off.
package limits

// Off, as a limit that can be turned off, turns it off. It is untyped, so
// that it is a value of every signed field: counts, rates and durations.
const Off = -1

// Number is what a limit is: a count, a size, a rate or a duration.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 |
		~float32 | ~float64
}

// Signed is a limit that can be Off.
type Signed interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~float32 | ~float64
}

// Default sets *v to def unless *v is more than zero: the rule of a field
// that cannot be turned off.
func Default[T Number](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// DefaultOrOff sets *v to def when it is zero and to Off when it is
// negative: the rule of a field that Off turns off. def may itself be Off,
// for a limit that is off unless it is set.
func DefaultOrOff[T Signed](v *T, def T) {
	switch {
	case *v == 0:
		*v = def
	case *v < 0:
		*v = Off
	}
}

// IsOff reports whether v, a field that DefaultOrOff has set, is off.
func IsOff[T Signed](v T) bool { return v < 0 }

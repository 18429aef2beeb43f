package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// FormatKey is the object at the root of a bucket that names its layout:
// which program's keys the bucket holds and in which version of their
// layout.
const FormatKey = "format"

// FormatVersion is the newest version of the bucket layout
// (docs/operations.md, "The bucket") this binary reads and writes. A
// change of layout that an older binary would misread takes a new
// version. Version 1 keeps each room's manifest as one object
// overwritten; version 2 names how it keeps them (Manifests), so that a
// binary that only knows one object a room refuses a bucket of numbered
// manifests rather than finding no rooms in it.
const FormatVersion = 2

// Layouts of rooms' manifests (host/rooms/manifests.go).
const (
	// ManifestsOverwrite: one object a room, replaced under If-Match
	// (layout version 1).
	ManifestsOverwrite = "overwrite"
	// ManifestsNumbered: a new object a commit, created under
	// If-None-Match, for stores that take one write a second to a key.
	ManifestsNumbered = "numbered"
)

// formatName is the program a format object names.
const formatName = "wasmkeep"

// format is the body of the format object.
type format struct {
	Format    string `json:"format"`
	Version   int    `json:"version"`
	Manifests string `json:"manifests,omitempty"` // version 2
}

// ErrLayout: the node was told to keep rooms' manifests in another
// layout than the bucket's.
var ErrLayout = errors.New("store: the bucket keeps rooms' manifests in another layout")

// FormatError is a bucket whose format object names another program or
// another layout version than [FormatVersion].
type FormatError struct {
	Format  string // the program it names ("" if its body is not a format object)
	Version int
	Body    string // its body, cut short, when it could not be read as one
}

func (e *FormatError) Error() string {
	switch {
	case e.Format == "":
		return fmt.Sprintf("store: the bucket's %s object is not wasmkeep's (%q): is this bucket (or prefix) another program's?", FormatKey, e.Body)
	case e.Format != formatName:
		return fmt.Sprintf("store: the bucket holds %s's data, not wasmkeep's", e.Format)
	case e.Version > FormatVersion:
		return fmt.Sprintf("store: the bucket is in layout version %d, newer than this binary's %d: run a newer wasmkeep", e.Version, FormatVersion)
	}
	return fmt.Sprintf("store: the bucket is in layout version %d, which this binary (version %d) does not read", e.Version, FormatVersion)
}

// CheckFormat makes sure that b holds wasmkeep's bucket layout (version 1
// or FormatVersion) and returns how it keeps rooms' manifests: in a
// bucket without a format object it creates one (If-None-Match, so that of
// nodes starting at once on a new bucket one writes it and the others read
// it) for manifests, ManifestsOverwrite if "" (in version 1, which older
// binaries read too); it refuses, with a *FormatError, a bucket whose
// format object names another program or version, and with ErrLayout one
// that keeps manifests otherwise than manifests asks ("" takes the
// bucket's).
//
// A bucket written before format objects existed has none and is of
// version 1, so it is taken as it is.
func CheckFormat(ctx context.Context, b Bucket, manifests string) (string, error) {
	switch manifests {
	case "", ManifestsOverwrite, ManifestsNumbered:
	default:
		return "", fmt.Errorf("store: manifests %q (use %q or %q)", manifests, ManifestsOverwrite, ManifestsNumbered)
	}
	mine := format{Format: formatName, Version: 1}
	if manifests == ManifestsNumbered {
		mine = format{Format: formatName, Version: 2, Manifests: ManifestsNumbered}
	}
	want, _ := json.Marshal(mine)
	for attempt := 0; ; attempt++ {
		body, _, err := b.Get(ctx, FormatKey)
		if errors.Is(err, ErrNotFound) {
			_, err = b.Put(ctx, FormatKey, want, IfNoneMatch())
			switch {
			case err == nil:
				return layoutOf(mine), nil
			case attempt < 3 && (errors.Is(err, ErrPrecondition) || errors.Is(err, ErrConflict) || errors.Is(err, ErrUnknownOutcome)):
				continue // someone else wrote it, or it may have landed: read it
			}
			return "", fmt.Errorf("store: writing the bucket's format object: %w", err)
		}
		if err != nil {
			return "", fmt.Errorf("store: reading the bucket's format object: %w", err)
		}
		var f format
		if json.Unmarshal(body, &f) != nil || f.Format == "" {
			return "", &FormatError{Body: string(body[:min(len(body), 64)])}
		}
		if f.Format != formatName || f.Version < 1 || f.Version > FormatVersion ||
			f.Version == 1 && f.Manifests != "" || f.Version == 2 && f.Manifests != ManifestsNumbered && f.Manifests != ManifestsOverwrite {
			return "", &FormatError{Format: f.Format, Version: f.Version}
		}
		have := layoutOf(f)
		if manifests != "" && manifests != have {
			return "", fmt.Errorf("%w: it keeps them %s, the node was told %s (a bucket's layout is chosen when its first node starts)", ErrLayout, have, manifests)
		}
		return have, nil
	}
}

// layoutOf is the manifests layout f names.
func layoutOf(f format) string {
	if f.Manifests == "" {
		return ManifestsOverwrite
	}
	return f.Manifests
}

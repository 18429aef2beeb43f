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

// FormatVersion is the version of the bucket layout (docs/operations.md,
// "The bucket") this binary reads and writes. A change of layout that an
// older binary would misread takes a new version.
const FormatVersion = 1

// formatName is the program a format object names.
const formatName = "wasmkeep"

// format is the body of the format object.
type format struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

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

// CheckFormat makes sure that b holds wasmkeep's bucket layout of
// [FormatVersion]: in a bucket without a format object it creates one
// (If-None-Match, so that of nodes starting at once on a new bucket one
// writes it and the others read it), and it refuses, with a *FormatError,
// a bucket whose format object names another program or version.
//
// A bucket written before format objects existed has none and is of
// version 1, so it is taken as it is.
func CheckFormat(ctx context.Context, b Bucket) error {
	want, _ := json.Marshal(format{Format: formatName, Version: FormatVersion})
	for attempt := 0; ; attempt++ {
		body, _, err := b.Get(ctx, FormatKey)
		if errors.Is(err, ErrNotFound) {
			_, err = b.Put(ctx, FormatKey, want, IfNoneMatch())
			switch {
			case err == nil:
				return nil
			case attempt < 3 && (errors.Is(err, ErrPrecondition) || errors.Is(err, ErrConflict) || errors.Is(err, ErrUnknownOutcome)):
				continue // someone else wrote it, or it may have landed: read it
			}
			return fmt.Errorf("store: writing the bucket's format object: %w", err)
		}
		if err != nil {
			return fmt.Errorf("store: reading the bucket's format object: %w", err)
		}
		var f format
		if json.Unmarshal(body, &f) != nil || f.Format == "" {
			return &FormatError{Body: string(body[:min(len(body), 64)])}
		}
		if f.Format != formatName || f.Version != FormatVersion {
			return &FormatError{Format: f.Format, Version: f.Version}
		}
		return nil
	}
}

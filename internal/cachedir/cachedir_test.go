package cachedir

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
)

var now = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// put writes a file of size bytes last modified and read at the given
// ages before now.
func put(t *testing.T, dir, name string, size int, modified, read time.Duration) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, now.Add(-read), now.Add(-modified)); err != nil {
		t.Fatal(err)
	}
}

func left(t *testing.T, dirs ...string) []string {
	t.Helper()
	var names []string
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

func TestTrimRemovesTheLeastRecentlyUsed(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	day := 24 * time.Hour
	put(t, b, "older", 100, 40*day, 40*day)
	put(t, a, "old", 100, 30*day, 30*day)
	put(t, a, "recent", 100, 2*day, 2*day)
	put(t, b, "fresh", 100, time.Minute, time.Minute) // within MinAge
	// Written long ago and read yesterday, as a class compiled once and
	// loaded at every start: on Linux, used yesterday.
	put(t, a, "read", 100, 50*day, day)
	if err := os.Mkdir(filepath.Join(a, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}

	got, err := Trim([]string{a, b, filepath.Join(a, "missing")}, 250, now)
	if err != nil {
		t.Fatal(err)
	}
	// 500 bytes down to 250: the three least recently used go.
	want := []string{"fresh", "read", "sub"}
	if runtime.GOOS != "linux" { // no access times: "read" is the oldest
		want = []string{"fresh", "recent", "sub"}
	}
	if names := left(t, a, b); !slices.Equal(names, want) {
		t.Errorf("left %v; want %v", names, want)
	}
	if want := (Trimmed{Files: 5, Removed: 3, Bytes: 500, Freed: 300}); got != want {
		t.Errorf("Trim = %+v; want %+v", got, want)
	}
}

func TestTrimKeepsWhatWasJustUsed(t *testing.T) {
	dir := t.TempDir()
	put(t, dir, "a", 100, MinAge/2, MinAge/2)
	put(t, dir, "b", 100, MinAge/3, MinAge/3)
	got, err := Trim([]string{dir}, 50, now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Removed != 0 || len(left(t, dir)) != 2 {
		t.Errorf("Trim removed %d files used within MinAge (%+v)", got.Removed, got)
	}
}

func TestTrimUnderTheBoundRemovesNothing(t *testing.T) {
	dir := t.TempDir()
	put(t, dir, "a", 100, 400*24*time.Hour, 400*24*time.Hour)
	got, err := Trim([]string{dir}, 100, now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Removed != 0 || len(left(t, dir)) != 1 {
		t.Errorf("Trim removed %d files with 100 bytes under a bound of 100 (%+v)", got.Removed, got)
	}
}

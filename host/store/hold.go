package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// HoldFile is the file of a directory that [HoldDir] locks, and in which
// the holder writes who it is.
const HoldFile = "node.lock"

// holdRecordWait bounds how long HoldDir waits for the record of a holder
// that has taken the lock but not yet written it (a window of
// microseconds, unless the holder is stopped right there).
const holdRecordWait = time.Second

// Holder names the process that holds a directory, for the process that is
// refused it to report.
type Holder struct {
	PID     int       `json:"pid"`
	Host    string    `json:"host"`
	Started time.Time `json:"started"`
}

// InUseError is [HoldDir]'s answer when another process holds the
// directory.
type InUseError struct {
	// Dir is the directory, as given to HoldDir.
	Dir string
	// Holder is what the holder wrote of itself; the zero Holder if it
	// wrote nothing readable.
	Holder Holder
}

// Error says who holds the directory, in words a user can act on.
func (e *InUseError) Error() string {
	if e.Holder.PID == 0 {
		return fmt.Sprintf("data directory %s is in use by another process (it holds %s but does not say who it is)", e.Dir, HoldFile)
	}
	return fmt.Sprintf("data directory %s is in use by wasmkeep pid %d on host %s (started %s)",
		e.Dir, e.Holder.PID, e.Holder.Host, e.Holder.Started.UTC().Format(time.RFC3339))
}

// DirHold is one process's exclusive hold on a directory: a flock(2) on
// the directory's [HoldFile], which also holds the holder's [Holder] as
// JSON.
//
// A Dir does not need it: a Dir is safe for several processes, and keeps
// its own locks. A hold belongs to whoever must be alone on a directory,
// such as a node, whose resident rooms are copies of their stored state
// that a second node on the same directory would fork and overwrite.
//
// The lock is the kernel's, so it ends with the process however the
// process ends (kill -9 included), and a file left behind without a lock
// is not a holder: the next HoldDir takes it and writes its own record.
// The file is never removed, since a process that opened it just before
// the removal could lock the removed file while another locked a new one.
//
// A cluster whose nodes share one directory will take the same file with
// a shared lock instead, and a record naming the cluster. Shared and
// exclusive flocks exclude each other, so this exclusive hold keeps a
// lone node away from a cluster's directory, and the cluster's nodes away
// from a lone node's.
type DirHold struct {
	f *os.File
}

// HoldDir takes the exclusive hold on dir for the process me describes,
// creating dir if it does not exist. It does not wait: if another process
// (or another DirHold of this one) holds dir, it returns an *InUseError
// saying who. Release the hold with Release; it also ends with the process.
func HoldDir(dir string, me Holder) (*DirHold, error) {
	if !flockSupported {
		return nil, fmt.Errorf("store: hold %s: %w: no flock(2) on this system", dir, errors.ErrUnsupported)
	}
	record, err := json.Marshal(me)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: hold %s: %w", dir, err)
	}
	path := filepath.Join(dir, HoldFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: hold %s: %w", dir, err)
	}
	deadline := time.Now().Add(holdRecordWait)
	for {
		locked, err := flock(f, false)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("store: hold %s: %w", dir, err)
		}
		if locked {
			break
		}
		// Held: say by whom. A holder that has just taken the lock may
		// not have written its record yet, or may have just let go.
		holder, ok := readHolder(path)
		if ok || time.Now().After(deadline) {
			f.Close()
			return nil, &InUseError{Dir: dir, Holder: holder}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := writeRecord(f, append(record, '\n')); err != nil {
		f.Close()
		return nil, fmt.Errorf("store: hold %s: %w", dir, err)
	}
	return &DirHold{f: f}, nil
}

// Release ends the hold. The record is emptied first, so that a process
// refused while the next holder has not yet written its own does not
// report this one.
func (h *DirHold) Release() error {
	if h == nil || h.f == nil {
		return nil
	}
	err := h.f.Truncate(0)
	if cerr := h.f.Close(); err == nil {
		err = cerr // closing the only descriptor drops the flock
	}
	h.f = nil
	return err
}

// writeRecord replaces the contents of f with record. Only the holder
// writes, and readers retry a record they cannot parse.
func writeRecord(f *os.File, record []byte) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt(record, 0)
	return err
}

// readHolder reads the record in the hold file at path; ok is false if
// there is none or it is incomplete.
func readHolder(path string) (h Holder, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &h) != nil || h.PID == 0 {
		return Holder{}, false
	}
	return h, true
}

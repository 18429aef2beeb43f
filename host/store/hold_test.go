package store_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/host/store"
)

func holder(pid int) store.Holder {
	return store.Holder{PID: pid, Host: "host-a", Started: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
}

// holdDir takes the hold and releases it at the end of the test.
func holdDir(t *testing.T, dir string, me store.Holder) *store.DirHold {
	t.Helper()
	h, err := store.HoldDir(dir, me)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Release(); err != nil {
			t.Error(err)
		}
	})
	return h
}

// refused checks that HoldDir fails on dir because want holds it.
func refused(t *testing.T, dir string, want store.Holder) {
	t.Helper()
	h, err := store.HoldDir(dir, holder(2))
	var inUse *store.InUseError
	if !errors.As(err, &inUse) {
		if h != nil {
			h.Release()
		}
		t.Fatalf("HoldDir of a held directory: %v, want an InUseError", err)
	}
	if inUse.Dir != dir || inUse.Holder.PID != want.PID || inUse.Holder.Host != want.Host || !inUse.Holder.Started.Equal(want.Started) {
		t.Fatalf("InUseError %+v, want the holder %+v of %s", inUse, want, dir)
	}
}

// TestHoldDir: a held directory is refused, naming its holder, until the
// hold is released; then the next holder takes it and its record.
func TestHoldDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data") // created by HoldDir
	first := holder(1234)
	h := holdDir(t, dir, first)
	refused(t, dir, first)
	_, err := store.HoldDir(dir, holder(2))
	if want := "data directory " + dir + " is in use by wasmkeep pid 1234 on host host-a (started 2026-12-01T10:00:00Z)"; err == nil || err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatalf("a second Release: %v", err)
	}
	second := holder(5678)
	holdDir(t, dir, second)
	refused(t, dir, second)
}

// TestHoldDirStaleFile: a hold file that a dead holder left behind (with
// its record, or with garbage) is no hold.
func TestHoldDirStaleFile(t *testing.T) {
	for _, stale := range []string{`{"pid":99999,"host":"gone","started":"2020-01-01T00:00:00Z"}` + "\n", "garbage", ""} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, store.HoldFile), []byte(stale), 0o644); err != nil {
			t.Fatal(err)
		}
		me := holder(4321)
		holdDir(t, dir, me)
		b, err := os.ReadFile(filepath.Join(dir, store.HoldFile))
		if err != nil {
			t.Fatal(err)
		}
		var got store.Holder
		if err := json.Unmarshal(b, &got); err != nil || got.PID != me.PID {
			t.Fatalf("record after taking a stale file (%q): %q, %v", stale, b, err)
		}
	}
}

// TestHoldDirSilentHolder: a holder that never writes its record is still
// a holder; the error says it does not say who it is.
func TestHoldDirSilentHolder(t *testing.T) {
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, store.HoldFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ok, err := store.Flock(f, false); !ok || err != nil {
		t.Fatalf("flock: %v, %v", ok, err)
	}
	_, err = store.HoldDir(dir, holder(2))
	var inUse *store.InUseError
	if !errors.As(err, &inUse) || inUse.Holder != (store.Holder{}) || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("HoldDir under a silent holder: %v", err)
	}
}

// TestHoldDirProcess: another process's hold is refused, and ends when that
// process is killed with SIGKILL.
func TestHoldDirProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := childCmd(t, "hold", dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "held\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q, %v", line, err)
	}
	_, err = store.HoldDir(dir, holder(2))
	var inUse *store.InUseError
	if !errors.As(err, &inUse) || inUse.Holder.PID != cmd.Process.Pid {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("HoldDir beside a holding process (pid %d): %v", cmd.Process.Pid, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	holdDir(t, dir, holder(3))
}

// holdChild holds dir until its standard input ends.
func holdChild(dir string) error {
	h, err := store.HoldDir(dir, store.Holder{PID: os.Getpid(), Host: "child", Started: time.Now()})
	if err != nil {
		return err
	}
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return h.Release()
}

package loadgen

import (
	"os"
	"testing"
	"time"
)

// TestProcessCPU: the CPU time read for this process (by pid 0 and by its
// own pid) grows while it works.
func TestProcessCPU(t *testing.T) {
	before, err := processCPU(0)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second) // the machine may be busy
	for {
		now, err := processCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now < before {
			t.Fatalf("CPU time went back from %v to %v", before, now)
		}
		if now >= before+2*clockTick {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %v–%v for 20 s of work", before, now)
		}
	}
	if _, err := processCPU(1 << 30); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}

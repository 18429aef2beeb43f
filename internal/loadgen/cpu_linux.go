package loadgen

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// every Linux platform Go supports).
const clockTick = 10 * time.Millisecond

// processCPU returns the CPU time (user and system) a process has used so
// far; pid 0 is this process.
func processCPU(pid int) (time.Duration, error) {
	name := "/proc/self/stat"
	if pid != 0 {
		name = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return 0, err
	}
	// The command name, second field, is in parentheses and may hold
	// spaces: fields are counted after its closing one.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: unexpected format", name)
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: unexpected format", name)
	}
	// Fields 14 and 15 of the file (utime, stime) are 12 and 13 here.
	utime, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: unexpected format", name)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

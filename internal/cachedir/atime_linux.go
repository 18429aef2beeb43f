package cachedir

import (
	"io/fs"
	"syscall"
	"time"
)

// accessTime is the file's last access, which the kernel keeps (under the
// default relatime, at least once a day and after every write), so a
// file wazero reads at every start counts as used.
func accessTime(info fs.FileInfo) time.Time {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Atim.Sec, st.Atim.Nsec)
	}
	return time.Time{}
}

package sim

import (
	"syscall"
	"time"
	"unsafe"
)

// clockThreadCPUTime is Linux's CLOCK_THREAD_CPUTIME_ID.
const clockThreadCPUTime = 3

// threadCPU is the CPU time the calling OS thread has used (Run locks its
// goroutine to one), so that a run's CPU figures do not count the time other
// programs held the machine's cores: the thread's CPU-time clock, to the
// nanosecond (getrusage's figure moves by scheduler ticks, too coarse for a
// replay of a few milliseconds: isolate.go).
func threadCPU() (time.Duration, bool) {
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

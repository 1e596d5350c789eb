package sim

import (
	"syscall"
	"time"
)

// threadCPU is the CPU time the calling OS thread has used (Run locks its
// goroutine to one), so that a run's CPU figures do not count the time other
// programs held the machine's cores.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

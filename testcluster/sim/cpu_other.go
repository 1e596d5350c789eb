//go:build !linux

package sim

import "time"

// threadCPU is not measured here: the run's wall time stands in for it.
func threadCPU() (time.Duration, bool) { return 0, false }

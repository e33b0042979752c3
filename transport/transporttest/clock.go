// Package transporttest joins transport engines over a simulated link with
// a manual clock and seeded fault injection (loss, reordering, duplication,
// corruption), so every IBA rule can be checked deterministically, in the
// manner of gVisor's faketime and link/channel.
package transporttest

import (
	"time"

	"github.com/vrnic/vrnicd/transport/clock"
)

// ManualClock is the project's manual clock (clock.Manual).
type ManualClock = clock.Manual

// NewManualClock starts a manual clock at a fixed, arbitrary moment.
func NewManualClock() *ManualClock {
	return clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

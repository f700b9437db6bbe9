//go:build !linux

package link

// SystemClock is unknown off Linux.
func SystemClock() ClockState {
	return ClockState{Reason: "clock synchronisation state is read on Linux only (adjtimex)"}
}

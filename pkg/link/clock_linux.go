package link

import "syscall"

// SystemClock reads the kernel's NTP state (adjtimex): whether the clock
// is synchronised and its estimated maximum error.
func SystemClock() ClockState {
	var tx syscall.Timex
	state, err := syscall.Adjtimex(&tx)
	if err != nil {
		return ClockState{Source: "adjtimex", Reason: err.Error()}
	}
	const timeError = 5                                 // TIME_ERROR: the clock is not synchronised
	synced := state != timeError && tx.Status&0x40 == 0 // STA_UNSYNC
	return ClockState{Synced: &synced, MaxErrorUS: int64(tx.Maxerror), Source: "adjtimex"}
}

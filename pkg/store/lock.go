package store

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// lockedError names the process holding the store's flock when /proc/locks
// can tell (Linux); the pid is a hint, hence the question mark.
func lockedError(path string) error { return &lockedErr{path: path, pid: lockHolder(path)} }

type lockedErr struct {
	path string
	pid  int
}

func (e *lockedErr) Error() string {
	if e.pid > 0 {
		return fmt.Sprintf("store: %s is in use by another process (pid %d?)", e.path, e.pid)
	}
	return fmt.Sprintf("store: %s is in use by another process", e.path)
}

func (e *lockedErr) Is(target error) bool { return target == ErrLocked }

func lockHolder(path string) int {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if pid, ok := parseLockLine(sc.Text(), uint64(st.Dev), st.Ino); ok && pid != os.Getpid() {
			return pid
		}
	}
	return 0
}

// parseLockLine reads one /proc/locks line ("1: FLOCK ADVISORY WRITE 1234
// 08:01:5678 0 EOF"; "->" marks a waiter) and returns its pid when it is a
// held FLOCK on the file with the given device and inode.
func parseLockLine(line string, dev, ino uint64) (int, bool) {
	f := strings.Fields(line)
	if len(f) > 1 && f[1] == "->" {
		return 0, false
	}
	if len(f) < 6 || f[1] != "FLOCK" {
		return 0, false
	}
	pid, err := strconv.Atoi(f[4])
	if err != nil || pid <= 0 {
		return 0, false
	}
	parts := strings.Split(f[5], ":")
	if len(parts) != 3 {
		return 0, false
	}
	maj, err1 := strconv.ParseUint(parts[0], 16, 32)
	mnr, err2 := strconv.ParseUint(parts[1], 16, 32)
	in, err3 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || in != ino {
		return 0, false
	}
	// Linux encodes dev_t as major (12 bits split) and minor (20 bits split).
	dmaj := (dev>>8)&0xfff | (dev>>32)&^0xfff
	dmin := dev&0xff | (dev>>12)&^0xff
	if maj != dmaj || mnr != dmin {
		return 0, false
	}
	return pid, true
}

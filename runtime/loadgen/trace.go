package loadgen

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ParseTrace reads arrival offsets, one per line: seconds ("0.25") or a Go
// duration ("250ms"); blank lines and text after '#' are ignored. Offsets
// must be ≥ 0; they are returned sorted.
func ParseTrace(r io.Reader) ([]time.Duration, error) {
	var out []time.Duration
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := sc.Text()
		if i := strings.IndexByte(s, '#'); i >= 0 {
			s = s[:i]
		}
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			f, ferr := strconv.ParseFloat(s, 64)
			if ferr != nil || f != f || f > 1e9 {
				return nil, fmt.Errorf("%w: line %d: %q is neither seconds nor a duration", ErrTrace, line, s)
			}
			d = time.Duration(f * float64(time.Second))
		}
		if d < 0 {
			return nil, fmt.Errorf("%w: line %d: negative offset %s", ErrTrace, line, s)
		}
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTrace, err)
	}
	slices.Sort(out)
	return out, nil
}

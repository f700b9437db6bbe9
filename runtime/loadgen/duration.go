package loadgen

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that reads and writes as a Go duration string
// ("1.5s", "300ms") in JSON and YAML; a bare number is taken as seconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts a duration string or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("invalid duration %q", s)
		}
		*d = Duration(v)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("invalid duration %s: want \"1.5s\" or seconds", b)
	}
	*d = Duration(f * float64(time.Second))
	return nil
}

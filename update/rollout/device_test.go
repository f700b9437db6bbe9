package rollout

import (
	"errors"
	"testing"

	"github.com/edgeinfer/edgeinfer/update"
)

func TestConfig(t *testing.T) {
	for _, c := range []Config{{CheckInterval: -1}, {RetryInterval: -1}, {Labels: map[string]string{"a=b": "x"}}, {Labels: map[string]string{"": "x"}}} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if err := (Config{Labels: map[string]string{"site": "berlin"}}).Validate(); err != nil {
		t.Error(err)
	}
	if _, err := New(Config{}, Deps{}, update.Config{Model: "m"}, update.Deps{}); !errors.Is(err, ErrConfig) {
		t.Errorf("New without deps: %v", err)
	}
}

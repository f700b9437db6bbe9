package device

import (
	"errors"
	"testing"

	"github.com/edgeinfer/edgeinfer/update"
	"github.com/edgeinfer/edgeinfer/update/link"
)

func TestRequestNames(t *testing.T) {
	// The link's request topics are req/<name>/<id>: one level per name.
	for _, topic := range []string{update.TopicMeta, update.TopicChunk} {
		if n := RequestName(topic); n == "" || n == topic || len(n) != len(topic) {
			t.Errorf("RequestName(%q) = %q", topic, n)
		}
	}
	if got := StateTopic(link.NewTopics("f", "d")); got != "edgeinfer/v1/f/d/update" {
		t.Errorf("state topic %q", got)
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{CheckInterval: -1}, {RetryInterval: -1}, {Labels: map[string]string{"a=b": "x"}}, {Labels: map[string]string{"": "x"}}} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if err := (Config{Labels: map[string]string{"site": "berlin"}}).Validate(); err != nil {
		t.Error(err)
	}
	if _, err := New(Config{}, Deps{}, "m", nil); !errors.Is(err, ErrConfig) {
		t.Errorf("New without deps: %v", err)
	}
}

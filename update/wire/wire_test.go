package wire

import (
	"testing"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	"github.com/edgeinfer/edgeinfer/update"
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

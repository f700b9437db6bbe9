package tokenizer

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// TestTinyLM loads the byte-level BPE trained with the tiny model in
// examples/tinylm and checks it against the ids that model's training
// script produced (tokenizer_check.json), when those files exist.
func TestTinyLM(t *testing.T) {
	const dir = "../../examples/tinylm/"
	data, err := os.ReadFile(dir + "tokenizer_check.json")
	if err != nil {
		t.Skipf("examples/tinylm has no tokenizer_check.json yet: %v", err)
	}
	tk, err := Load(dir + "tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Text string `json:"text"`
		IDs  []int  `json:"ids"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	ids := 0
	for _, c := range cases {
		got := tk.Encode(c.Text)
		ids += len(got)
		if !slices.Equal(got, c.IDs) {
			t.Errorf("Encode(%q) = %v, want %v", clip(c.Text), got, c.IDs)
		}
		if back, err := tk.Decode(got); err != nil || back != c.Text {
			t.Errorf("Decode(Encode(%q)) = %q, %v", clip(c.Text), clip(back), err)
		}
	}
	t.Logf("%d texts, %d ids identical to train.py's encoder", len(cases), ids)
}

package serve

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/edgeinfer/edgeinfer/runtime/internal/grammar/grammartest"
)

// testTools are three functions: plain properties, an enum and bounds,
// and $defs/$ref (which the calls' schema moves under its own $defs).
var testTools = map[string]string{
	"get_weather": `{"type":"object","properties":{"city":{"type":"string","maxLength":24},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"],"additionalProperties":false}`,
	"lot_status":  `{"type":"object","properties":{"lot":{"type":"integer","minimum":1,"maximum":9999},"verbose":{"type":"boolean"}},"required":["lot"],"additionalProperties":false}`,
	"set_route": `{"type":"object","$defs":{"stop":{"type":"object","properties":{"station":{"type":"string","enum":["press","paint","pack"]},"minutes":{"type":"integer","minimum":0,"maximum":90}},"required":["station","minutes"],"additionalProperties":false}},` +
		`"properties":{"stops":{"type":"array","items":{"$ref":"#/$defs/stop"},"minItems":1,"maxItems":3}},"required":["stops"],"additionalProperties":false}`,
}

var testToolNames = []string{"get_weather", "lot_status", "set_route"}

func toolsJSON(names ...string) string {
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf(`{"type":"function","function":{"name":%q,"description":"the %s tool","parameters":%s}}`, n, n, testTools[n]))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// answer is a chat answer's calls (assembled from the deltas when
// streamed), content and finish reason.
type answer struct {
	calls   []toolCall
	content *string
	finish  string
}

func readAnswer(t *testing.T, stream bool, data []byte) answer {
	t.Helper()
	var a answer
	if !stream {
		var r struct {
			Choices []struct {
				Message struct {
					Content   *string    `json:"content"`
					ToolCalls []toolCall `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(data, &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("answer %s: %v", data, err)
		}
		c := r.Choices[0]
		return answer{calls: c.Message.ToolCalls, content: c.Message.Content, finish: c.FinishReason}
	}
	var content strings.Builder
	for _, ev := range sseEvents(t, data) {
		c := choice0(ev)
		if c == nil {
			continue
		}
		if f, ok := c["finish_reason"].(string); ok {
			a.finish = f
		}
		d, _ := c["delta"].(map[string]any)
		if s, ok := d["content"].(string); ok {
			content.WriteString(s)
		}
		tcs, _ := d["tool_calls"].([]any)
		for _, x := range tcs {
			tc := x.(map[string]any)
			i := int(tc["index"].(float64))
			fn, _ := tc["function"].(map[string]any)
			if id, ok := tc["id"].(string); ok {
				if i != len(a.calls) || tc["type"] != "function" || fn["arguments"] != "" {
					t.Fatalf("first delta of call %d: %v", i, tc)
				}
				a.calls = append(a.calls, toolCall{ID: id, Type: "function"})
				a.calls[i].Function.Name = fn["name"].(string)
				continue
			}
			if i != len(a.calls)-1 || fn["name"] != nil {
				t.Fatalf("delta for call %d: %v", i, tc)
			}
			a.calls[i].Function.Arguments += fn["arguments"].(string)
		}
	}
	s := content.String()
	a.content = &s
	return a
}

// 200 generated tool calls on the tiny model, whole and streamed, with
// required, a named function and parallel calls: every call names a tool
// that was offered, and its arguments parse and validate against that
// tool's schema; ids are unique, finish_reason is tool_calls and content
// null.
func TestToolCallsValid(t *testing.T) {
	f := openFixture(t, Config{})
	const n = 200
	var mu sync.Mutex
	calls, valid, answers := 0, 0, 0
	ids := map[string]bool{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			stream := i%2 == 1
			// tinychat's template ignores the tools; tinylm has none, so
			// the tools are paragraphs of its prompt: one fits its
			// 256-token context
			model := "tinychat"
			choice := `"required"`
			offered := testToolNames
			switch i % 5 {
			case 1:
				choice = fmt.Sprintf(`{"type":"function","function":{"name":%q}}`, testToolNames[i%3])
			case 2:
				offered = []string{testToolNames[i%2]}
				model = "tinylm"
			}
			parallel := i%3 != 0
			body := fmt.Sprintf(`{"model":%q,"max_tokens":72,"temperature":1,"seed":%d,"stream":%v,"messages":[{"role":"user","content":"Task %d"}],"tools":%s,"tool_choice":%s,"parallel_tool_calls":%v}`,
				model, i, stream, i, toolsJSON(offered...), choice, parallel)
			resp, data := f.post(t, "/v1/chat/completions", body)
			if resp.StatusCode != 200 {
				t.Errorf("%d: %s", resp.StatusCode, data)
				return
			}
			a := readAnswer(t, stream, data)
			mu.Lock()
			defer mu.Unlock()
			answers++
			if a.finish != "tool_calls" || len(a.calls) == 0 || (!stream && a.content != nil) || (stream && *a.content != "") {
				t.Errorf("answer %d (stream %v): finish %q, %d calls, content %v: %s", i, stream, a.finish, len(a.calls), a.content, data)
				return
			}
			if !parallel && len(a.calls) != 1 {
				t.Errorf("answer %d: parallel_tool_calls false gave %d calls", i, len(a.calls))
			}
			for _, c := range a.calls {
				calls++
				if !strings.HasPrefix(c.ID, "call_") || ids[c.ID] || c.Type != "function" {
					t.Errorf("call id %q type %q (repeated: %v)", c.ID, c.Type, ids[c.ID])
				}
				ids[c.ID] = true
				schema, ok := testTools[c.Function.Name]
				if !ok || !strings.Contains(toolsJSON(offered...), `"`+c.Function.Name+`"`) {
					t.Errorf("answer %d calls %q, not offered", i, c.Function.Name)
					continue
				}
				if strings.Contains(choice, "function") && !strings.Contains(choice, `"`+c.Function.Name+`"`) {
					t.Errorf("answer %d calls %q, not the named function %s", i, c.Function.Name, choice)
					continue
				}
				if err := grammartest.Validate([]byte(schema), []byte(c.Function.Arguments)); err != nil {
					t.Errorf("answer %d: %s(%s): %v", i, c.Function.Name, c.Function.Arguments, err)
					continue
				}
				valid++
			}
		}()
	}
	wg.Wait()
	if answers != n || valid != calls {
		t.Fatalf("%d answers of %d; %d of %d calls valid", answers, n, valid, calls)
	}
	t.Logf("%d answers, %d tool calls, %d valid (arguments parse and validate against their tool's schema)", answers, calls, valid)
}

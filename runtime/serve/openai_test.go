package serve

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// openaiScript drives the server with the official OpenAI client: chat
// streaming and not, a text completion, the model list, and errors the
// client must surface as its typed errors.
const openaiScript = `
import OpenAI from 'openai';
const c = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'k', maxRetries: 0 });
const out = [];
const check = (ok, what) => { if (!ok) { console.log('FAIL ' + what); process.exit(1); } out.push(what); };

const r = await c.chat.completions.create({ model: 'tinylm', max_tokens: 8, messages: [{ role: 'user', content: 'Call me Ishmael' }] });
check(r.object === 'chat.completion' && r.choices[0].message.content.length > 0 && r.choices[0].finish_reason === 'length' &&
  r.usage.completion_tokens === 8, 'chat');

const s = await c.chat.completions.create({ model: 'tinychat', stream: true, max_tokens: 12, stream_options: { include_usage: true },
  messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Call me Ishmael' }] });
let text = '', fin = null, usage = null, role = null;
for await (const ch of s) {
  if (ch.choices[0]?.delta?.role) role = ch.choices[0].delta.role;
  text += ch.choices[0]?.delta?.content ?? '';
  fin = ch.choices[0]?.finish_reason ?? fin;
  usage = ch.usage ?? usage;
}
check(role === 'assistant' && text.length > 0 && fin && usage && usage.completion_tokens > 0, 'chat stream (' + fin + ')');

const t = await c.completions.create({ model: 'tinylm', prompt: 'Call me Ishmael', max_tokens: 5, seed: 3, temperature: 0.8 });
check(t.object === 'text_completion' && t.choices[0].text.length > 0 && t.usage.completion_tokens === 5, 'completion');

const ts = await c.completions.create({ model: 'tinylm', prompt: 'The whale', max_tokens: 5, stream: true });
let n = 0; for await (const ch of ts) n += ch.choices[0]?.text ? 1 : 0;
check(n > 0, 'completion stream');

const models = [];
for await (const m of c.models.list()) models.push(m.id);
check(models.join(',') === 'addone,tiny-ids,tinychat,tinylm', 'models');

try { await c.chat.completions.create({ model: 'tinylm', n: 2, messages: [{ role: 'user', content: 'x' }] }); check(false, 'n=2 refused'); }
catch (e) { check(e instanceof OpenAI.BadRequestError && e.param === 'n', 'n=2 -> BadRequestError'); }
try { await c.chat.completions.create({ model: 'moby', messages: [{ role: 'user', content: 'x' }] }); check(false, 'unknown model'); }
catch (e) { check(e instanceof OpenAI.NotFoundError && e.code === 'model_not_found', 'unknown model -> NotFoundError'); }
try {
  await c.chat.completions.create({ model: 'tinylm', stream: true, messages: [{ role: 'user', content: 'x' }],
    edgeinfer: { ttft_ms: 0.001, fail_fast: true } });
  check(false, 'overload');
} catch (e) { check(e instanceof OpenAI.RateLimitError && Number(e.headers.get('retry-after')) >= 1, 'overload -> RateLimitError'); }
console.log('ok ' + out.join('; '));
`

// npmPackage finds a package unpacked by platforms/checkers/fetch.sh.
func npmPackage(t *testing.T, spec string) string {
	t.Helper()
	root := os.Getenv("EDGEINFER_NPM")
	if root == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		root = filepath.Join(base, "edgeinfer", "npm")
	}
	dir := filepath.Join(root, strings.ReplaceAll(spec, "/", "_"), "package")
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		t.Skipf("%s is not in %s (run platforms/checkers/fetch.sh, part of make setup)", spec, root)
	}
	return dir
}

func TestOpenAIClient(t *testing.T) {
	f := openFixture(t, Config{})
	// The scheduler predicts admission from what it measured: warm it.
	f.post(t, "/v1/completions", `{"model":"tinylm","prompt":"Call me Ishmael","max_tokens":2}`)
	out, err := nodeScript(t, f, openaiScript, []string{"openai@7.55.0"})
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(out)), "ok ") {
		t.Fatalf("openai client: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(string(out)))
}

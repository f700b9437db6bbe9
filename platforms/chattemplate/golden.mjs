// Renders every chat template under runtime/tokenizer/testdata/chat with
// Hugging Face's own renderer (@huggingface/jinja) for every case of
// cases.json (with the case's tools, when it has some, as the template's
// tools variable), with and without the generation prompt, and writes
// golden.json beside them. runtime/tokenizer's chat test compares its Go
// renders with this file byte for byte, and re-runs this script when node
// and the package are at hand (so a stale golden file shows).
//
//   JINJA=/path/to/unpacked/@huggingface/jinja node platforms/chattemplate/golden.mjs [OUT]
//
// JINJA is the folder `npm pack @huggingface/jinja@0.5.11` unpacks
// (its package/ directory). OUT defaults to the testdata folder's
// golden.json; "-" writes to stdout.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL, fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const dir = path.join(root, 'runtime/tokenizer/testdata/chat');
const jinjaDir = process.env.JINJA;
if (!jinjaDir) {
  console.error('JINJA must name the unpacked @huggingface/jinja package folder');
  process.exit(2);
}
const pkg = JSON.parse(fs.readFileSync(path.join(jinjaDir, 'package.json'), 'utf8'));
const { Template } = await import(pathToFileURL(path.join(jinjaDir, 'dist/index.js')).href);

const cases = JSON.parse(fs.readFileSync(path.join(dir, 'cases.json'), 'utf8'));
const names = fs.readdirSync(dir).filter((f) => f.endsWith('.json') && f !== 'cases.json' && f !== 'golden.json').sort();
const renders = [];
for (const file of names) {
  const t = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
  const tmpl = new Template(t.chat_template);
  for (const c of cases) {
    for (const gen of [true, false]) {
      const r = { template: file.replace(/\.json$/, ''), case: c.name, add_generation_prompt: gen };
      try {
        const vars = {
          messages: c.messages,
          add_generation_prompt: gen,
          bos_token: t.bos_token ?? '',
          eos_token: t.eos_token ?? '',
        };
        // tools as apply_chat_template passes them: only when there are some
        if (c.tools) vars.tools = c.tools;
        r.text = tmpl.render(vars);
      } catch (e) {
        r.error = String(e.message ?? e);
      }
      renders.push(r);
    }
  }
}
const out = JSON.stringify({ generator: `${pkg.name} ${pkg.version}`, renders }, null, 1) + '\n';
const dest = process.argv[2] ?? path.join(dir, 'golden.json');
if (dest === '-') process.stdout.write(out);
else fs.writeFileSync(dest, out);

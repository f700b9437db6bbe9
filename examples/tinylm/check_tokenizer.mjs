// Checks tokenizer.json against Hugging Face's JavaScript tokenizers: every
// text in tokenizer_check.json (written by train.py) must encode to exactly
// the ids train.py's own encoder produced, and decode back to the text.
//
//   mkdir /tmp/hf && cd /tmp/hf && npm install @huggingface/tokenizers@0.2.0
//   node --experimental-default-type=module check_tokenizer.mjs /tmp/hf DIR
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const [nodeDir, dir] = process.argv.slice(2);
const require = createRequire(join(nodeDir, "package.json"));
const { Tokenizer } = require("@huggingface/tokenizers");
const tok = new Tokenizer(JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")), {});
const cases = JSON.parse(readFileSync(join(dir, "tokenizer_check.json"), "utf8"));
let ok = 0, tokens = 0;
for (const c of cases) {
  const ids = tok.encode(c.text).ids;
  const same = ids.length === c.ids.length && ids.every((v, i) => v === c.ids[i]);
  const back = tok.decode(ids);
  if (same && back === c.text) ok++;
  else console.log("MISMATCH", JSON.stringify(c.text.slice(0, 60)), same ? "decode" : "ids",
    JSON.stringify(ids.slice(0, 20)), JSON.stringify(c.ids.slice(0, 20)), JSON.stringify(back.slice(0, 60)));
  tokens += ids.length;
}
console.log(`@huggingface/tokenizers: ${ok}/${cases.length} texts (${tokens} tokens) give identical ids and decode back exactly`);
process.exit(ok === cases.length ? 0 : 1);

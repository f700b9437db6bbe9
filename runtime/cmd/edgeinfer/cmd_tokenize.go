package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

func init() {
	register(&command{
		name:    "tokenize",
		summary: "encode UTF-8 text on stdin to token ids (JSON array), or decode ids back",
		run:     runTokenize,
	})
}

// tokenizeStdin is a variable so tests can feed the command.
var tokenizeStdin io.Reader = os.Stdin

func runTokenize(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("tokenize")
	path := fs.String("tokenizer", "", "path to a Hugging Face tokenizer.json (required)")
	decode := fs.Bool("decode", false, "read a JSON array of ids on stdin and print the text")
	special := fs.Bool("add-special-tokens", false, "wrap the ids in the post-processor template (BOS)")
	skip := fs.Bool("skip-special-tokens", false, "with --decode: leave special tokens out")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return fmt.Errorf("%w: --tokenizer is required", errUsage)
	}
	if err := needFile(*path); err != nil {
		return err
	}
	tk, err := tokenizer.Load(*path)
	if err != nil {
		return err
	}
	in, err := io.ReadAll(tokenizeStdin)
	if err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if *decode {
		var ids []int
		if err := json.Unmarshal(in, &ids); err != nil {
			return fmt.Errorf("stdin is not a JSON array of token ids: %w", err)
		}
		text, err := tk.DecodeWith(ids, tokenizer.DecodeOptions{SkipSpecialTokens: *skip})
		if err != nil {
			return err
		}
		_, err = io.WriteString(stdout, text)
		return err
	}
	ids := tk.EncodeWith(string(in), tokenizer.EncodeOptions{AddSpecialTokens: *special})
	out, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", out)
	return err
}

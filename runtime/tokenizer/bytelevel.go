package tokenizer

// GPT-2's byte-level alphabet maps each of the 256 byte values to a printable
// rune, so that a vocabulary of strings can hold arbitrary bytes: printable
// Latin-1 bytes map to themselves and the rest (controls, space, DEL, NBSP,
// soft hyphen) to U+0100 onward, in byte order. Every byte-level tokenizer
// (GPT-2, Llama-3, Qwen) stores its vocabulary in this alphabet.

var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelDecode turns one vocabulary string back into the bytes it stands
// for. As in Hugging Face's ByteLevel decoder, a token holding a rune outside
// the alphabet (an added token such as "<|im_start|>" with a space in it) is
// taken verbatim instead.
func byteLevelDecode(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return append(dst[:start], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

// byteLevelEncode maps raw bytes to their byte-level vocabulary string.
func byteLevelEncode(b []byte) string {
	rs := make([]rune, len(b))
	for i, c := range b {
		rs[i] = byteToRune[c]
	}
	return string(rs)
}

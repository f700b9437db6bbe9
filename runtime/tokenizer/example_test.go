package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/edgeinfer/edgeinfer/runtime/tokenizer"
)

func Example() {
	tk, err := tokenizer.Load("testdata/small_bytelevel/tokenizer.json")
	if err != nil {
		log.Fatal(err)
	}
	ids := tk.EncodeWithSpecial("Call me Ishmael.")
	fmt.Println(ids)
	text, err := tk.DecodeWith(ids, tokenizer.DecodeOptions{SkipSpecialTokens: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(text)
	// Output:
	// [2323 34 543 757 358 939 76 64 301 13]
	// Call me Ishmael.
}

// A model generates one id at a time; the stream decoder emits text as soon
// as it is complete UTF-8, so a multi-token emoji appears whole.
func ExampleStreamDecoder() {
	tk, err := tokenizer.Load("testdata/small_gpt2/tokenizer.json")
	if err != nil {
		log.Fatal(err)
	}
	d := tk.NewStreamDecoder()
	for _, id := range tk.Encode("whale 🐋!") {
		s, err := d.Add(id)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%q ", s)
	}
	fmt.Printf("%q\n", d.Flush())
	// Output:
	// "wh" "ale" " " "" "" "" "🐋" "!" ""
}

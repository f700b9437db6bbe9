package grammar

// Compact JSON: no whitespace outside strings, so a model cannot wander in
// whitespace; numbers without exponents and at most 15 digits on each side
// of the point (exact in a float64, as JavaScript parses them).

const maxDigits = 15

func digit() expr   { return byteIn('0', '9') }
func digit19() expr { return byteIn('1', '9') }

// jsonString is a JSON string of any characters.
func jsonString() expr { return seq(eLit(`"`), rep(jsonChar(), 0, -1), eLit(`"`)) }

// jsonInteger is an integer of at most maxDigits digits.
func jsonInteger() expr {
	return seq(opt(eLit("-")), alt(eLit("0"), seq(digit19(), rep(digit(), 0, maxDigits-1))))
}

// jsonNumber is a number: an integer with an optional fraction.
func jsonNumber() expr { return seq(jsonInteger(), opt(fraction())) }

func fraction() expr { return seq(eLit("."), rep(digit(), 1, maxDigits)) }

// jsonValueRule adds the rule of any JSON value (objects and arrays call
// it for their members) and returns its number.
func jsonValueRule(b *builder) int {
	v := b.rule("value")
	b.bodies[v] = alt(jsonObject(v), jsonArray(v), jsonString(), jsonNumber(), eLit("true"), eLit("false"), eLit("null"))
	return v
}

// jsonObject is any object whose member values are the rule value.
func jsonObject(value int) expr {
	member := seq(jsonString(), eLit(":"), eCall(value))
	return seq(eLit("{"), alt(eLit("}"), seq(member, rep(seq(eLit(","), member), 0, -1), eLit("}"))))
}

// jsonArray is any array whose items are the rule value.
func jsonArray(value int) expr {
	return seq(eLit("["), alt(eLit("]"), seq(eCall(value), rep(seq(eLit(","), eCall(value)), 0, -1), eLit("]"))))
}

// nonZeroFraction is a fraction whose last digit is not 0 (so it is above
// zero).
func nonZeroFraction() expr {
	return seq(eLit("."), rep(digit(), 0, maxDigits-1), digit19())
}

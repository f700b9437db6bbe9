package grammar

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// JSONSchema compiles a JSON Schema to the grammar of the compact JSON
// values it accepts. It takes at least what OpenAI's strict structured
// outputs accept: objects (properties in the order written, required or
// optional, additionalProperties), arrays (items, prefixItems,
// minItems/maxItems), enum and const, anyOf, type lists, $defs/definitions
// and $ref (recursion included), strings with pattern (the RE2 subset of
// ECMAScript regular expressions), format (date-time, date, time, uuid,
// email, hostname, ipv4, ipv6, uri, duration) and minLength/maxLength,
// integers and numbers with bounds, booleans and null. Annotations (title,
// description, default, examples, …) are ignored; a keyword that
// constrains values in a way the compiler cannot honour is refused with an
// error naming it, never ignored.
//
// What is generated is a subset of what the schema accepts: properties
// beyond the listed ones are never written, integers have at most 15
// digits, numbers no exponent, strings only the escapes JSON needs, and a
// maxLength past 256 characters writes at most 256.
func JSONSchema(schema []byte) (*Grammar, error) {
	return jsonSchema(schema, Frame{})
}

// JSONSchemaOrText compiles the choice between a JSON value the schema
// accepts (as JSONSchema writes it, from the first byte) and free text
// whose first byte that is not white space is neither '{' nor '['; the
// empty output is text. The two cannot be confused: an output that begins
// with '{' or '[' is the JSON value, any other is text, which past its
// first character is unconstrained. It is what a model may write when it
// may answer or call a tool (OpenAI's tool_choice "auto"), decided by its
// first character.
func JSONSchemaOrText(schema []byte) (*Grammar, error) {
	return jsonSchema(schema, Frame{OrText: true})
}

// Frame is the text around the JSON values of JSONSchemaFramed: the tool
// call formats models are trained on put each call between tags (Qwen's
// "<tool_call>\n" … "\n</tool_call>", one after another for parallel
// calls).
type Frame struct {
	// Open and Close are written before and after each value.
	Open, Close string
	// Many allows one or more framed values, Sep between them.
	Many bool
	Sep  string
	// OrText also allows free text that does not begin as a framed value
	// does: its first byte that is not white space is not Open's first
	// byte (or, with no Open, neither '{' nor '['). The empty output is
	// text.
	OrText bool
}

// JSONSchemaFramed compiles framed JSON values the schema accepts: one, or
// with f.Many one or more, each as f.Open + value + f.Close, or with
// f.OrText free text instead (see Frame).
func JSONSchemaFramed(schema []byte, f Frame) (*Grammar, error) {
	return jsonSchema(schema, f)
}

// freeText is white space, then nothing or a byte that is neither white
// space nor one of not, then any bytes.
func freeText(not ...byte) expr {
	ws := eBytes{{'\t', '\n'}, {'\r', '\r'}, {' ', ' '}}
	excluded := append([]byte{'\t', '\n', '\r', ' '}, not...)
	var first eBytes
	lo := 0
	for b := 0; b < 256; b++ {
		if bytes.IndexByte(excluded, byte(b)) < 0 {
			continue
		}
		if b > lo {
			first = append(first, byteRange{byte(lo), byte(b - 1)})
		}
		lo = b + 1
	}
	if lo < 256 {
		first = append(first, byteRange{byte(lo), 0xff})
	}
	return seq(rep(ws, 0, -1), opt(seq(first, rep(byteIn(0, 0xff), 0, -1))))
}

func jsonSchema(schema []byte, f Frame) (*Grammar, error) {
	root, err := parseJSON(schema)
	if err != nil {
		return nil, fmt.Errorf("json schema: not valid JSON: %w", err)
	}
	c := &schemaCompiler{b: &builder{}, root: root, rules: map[*jv]int{}, inlining: map[*jv]int{}, value: -1}
	top := c.b.rule("root")
	c.inlining[root]++
	e, err := c.compile(root, "#")
	if err != nil {
		return nil, err
	}
	desc := "json schema"
	framed := f.Open != "" || f.Close != "" || f.Many
	if framed {
		one := seq(eLit(f.Open), e, eLit(f.Close))
		e, desc = one, "framed json schema"
		if f.Many {
			e = seq(one, rep(seq(eLit(f.Sep), one), 0, -1))
		}
	}
	if f.OrText {
		not := []byte{'{', '['}
		if f.Open != "" {
			not = []byte{f.Open[0]}
		}
		e, desc = alt(e, freeText(not...)), desc+" or text"
	}
	c.b.bodies[top] = e
	g, err := c.b.finish(desc)
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	return g, nil
}

type schemaCompiler struct {
	b        *builder
	root     *jv
	rules    map[*jv]int // schema nodes compiled as rules (recursive references)
	inlining map[*jv]int // schema nodes being compiled inline
	value    int         // the rule of any JSON value, or -1
	depth    int
}

// schemaError is a refusal naming the construct and where it is.
func schemaError(path, format string, args ...any) error {
	msg := "json schema: " + fmt.Sprintf(format, args...)
	if path != "#" {
		msg += " (at " + path + ")"
	}
	return errors.New(msg)
}

// Keywords that constrain values in ways the compiler does not honour.
var unsupported = map[string]bool{
	"patternProperties": true, "not": true, "if": true, "then": true, "else": true, "oneOf": true,
	"dependentRequired": true, "dependentSchemas": true, "dependencies": true, "contains": true,
	"minContains": true, "maxContains": true, "propertyNames": true, "minProperties": true,
	"maxProperties": true, "unevaluatedProperties": true, "unevaluatedItems": true,
	"$dynamicRef": true, "$recursiveRef": true, "additionalItems": true, "contentSchema": true,
}

// Keywords that constrain (everything else is an annotation, ignored).
var constraining = map[string]bool{
	"type": true, "enum": true, "const": true, "anyOf": true, "allOf": true, "$ref": true,
	"properties": true, "required": true, "additionalProperties": true, "items": true, "prefixItems": true,
	"minItems": true, "maxItems": true, "uniqueItems": true, "pattern": true, "format": true,
	"minLength": true, "maxLength": true, "minimum": true, "maximum": true, "exclusiveMinimum": true,
	"exclusiveMaximum": true, "multipleOf": true,
}

func (c *schemaCompiler) valueRule() int {
	if c.value < 0 {
		c.value = jsonValueRule(c.b)
	}
	return c.value
}

func (c *schemaCompiler) anyValue() expr { return eCall(c.valueRule()) }

const maxSchemaDepth = 64

func (c *schemaCompiler) compile(n *jv, path string) (expr, error) {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxSchemaDepth {
		return nil, schemaError(path, "nested deeper than %d schemas", maxSchemaDepth)
	}
	switch n.kind {
	case 'b':
		if n.b {
			return c.anyValue(), nil
		}
		return nil, schemaError(path, "the schema false matches nothing")
	case 'o':
	default:
		return nil, schemaError(path, "a schema must be an object or a boolean")
	}
	var cons []string
	for i, k := range n.keys {
		if unsupported[k] {
			return nil, schemaError(path, "keyword %q is not supported", k)
		}
		if constraining[k] {
			cons = append(cons, k)
		}
		if k == "uniqueItems" && n.vals[i].kind == 'b' && n.vals[i].b {
			if mx := n.get("maxItems"); mx == nil || !mx.isInteger() || mustFloat(mx) > 1 {
				return nil, schemaError(path, "keyword %q is not supported", k)
			}
		}
	}
	only := func(k string) error {
		for _, o := range cons {
			if o != k {
				return schemaError(path, "keyword %q beside %q is not supported (put the constraints inside it)", o, k)
			}
		}
		return nil
	}
	if r := n.get("$ref"); r != nil {
		if err := only("$ref"); err != nil {
			return nil, err
		}
		return c.ref(r, path)
	}
	if a := n.get("anyOf"); a != nil {
		if err := only("anyOf"); err != nil {
			return nil, err
		}
		if a.kind != 'a' || len(a.arr) == 0 {
			return nil, schemaError(path, "anyOf must be a non-empty array of schemas")
		}
		var alts []expr
		for i, s := range a.arr {
			e, err := c.compile(s, fmt.Sprintf("%s/anyOf/%d", path, i))
			if err != nil {
				return nil, err
			}
			alts = append(alts, e)
		}
		return alt(alts...), nil
	}
	if a := n.get("allOf"); a != nil {
		if err := only("allOf"); err != nil {
			return nil, err
		}
		if a.kind != 'a' || len(a.arr) != 1 {
			return nil, schemaError(path, "keyword \"allOf\" is supported with one schema only")
		}
		return c.compile(a.arr[0], path+"/allOf/0")
	}
	types, err := c.types(n, path)
	if err != nil {
		return nil, err
	}
	if n.get("enum") != nil || n.get("const") != nil {
		return c.enum(n, types, cons, path)
	}
	var alts []expr
	for _, t := range types {
		var e expr
		var err error
		switch t {
		case "null":
			e = eLit("null")
		case "boolean":
			e = alt(eLit("true"), eLit("false"))
		case "integer", "number":
			e, err = c.number(n, t == "integer", path)
		case "string":
			e, err = c.str(n, path)
		case "array":
			e, err = c.array(n, path)
		case "object":
			e, err = c.object(n, path)
		case "any":
			e = c.anyValue()
		}
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	return alt(alts...), nil
}

func mustFloat(v *jv) float64 { f, _ := v.float(); return f }

var typeNames = []string{"null", "boolean", "integer", "number", "string", "array", "object"}

// types lists the types a schema allows: its "type", or the one its
// keywords imply, or "any".
func (c *schemaCompiler) types(n *jv, path string) ([]string, error) {
	t := n.get("type")
	if t == nil {
		has := func(ks ...string) bool {
			for _, k := range ks {
				if n.get(k) != nil {
					return true
				}
			}
			return false
		}
		switch {
		case has("properties", "required", "additionalProperties"):
			return []string{"object"}, nil
		case has("items", "prefixItems", "minItems", "maxItems"):
			return []string{"array"}, nil
		case has("pattern", "format", "minLength", "maxLength"):
			return []string{"string"}, nil
		case has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
			return []string{"number"}, nil
		}
		return []string{"any"}, nil
	}
	var list []string
	switch t.kind {
	case 's':
		list = []string{t.str}
	case 'a':
		for _, x := range t.arr {
			if x.kind != 's' {
				return nil, schemaError(path, "type must be a string or an array of strings")
			}
			list = append(list, x.str)
		}
	default:
		return nil, schemaError(path, "type must be a string or an array of strings")
	}
	if len(list) == 0 {
		return nil, schemaError(path, "type is an empty list")
	}
	for _, x := range list {
		if !slices.Contains(typeNames, x) {
			return nil, schemaError(path, "type %q is not a JSON Schema type", x)
		}
	}
	// "number" covers "integer"
	if slices.Contains(list, "number") {
		list = slices.DeleteFunc(list, func(s string) bool { return s == "integer" })
	}
	return slices.Compact(list), nil
}

// ref compiles a $ref: inline, unless the target is being compiled
// already (a recursion), which becomes a call of the target's rule.
func (c *schemaCompiler) ref(r *jv, path string) (expr, error) {
	if r.kind != 's' {
		return nil, schemaError(path, "$ref must be a string")
	}
	target, err := c.resolve(r.str)
	if err != nil {
		return nil, schemaError(path, "$ref %q: %v", r.str, err)
	}
	if id, ok := c.rules[target]; ok {
		return eCall(id), nil
	}
	if c.inlining[target] > 0 {
		return eCall(c.ruleFor(target, r.str)), nil
	}
	c.inlining[target]++
	e, err := c.compile(target, r.str)
	c.inlining[target]--
	if err != nil {
		return nil, err
	}
	if id, ok := c.rules[target]; ok { // it recursed: its rule exists now
		return eCall(id), nil
	}
	if e.size() > 4096 { // compiled once, called from each use
		id := c.b.rule(r.str)
		c.b.bodies[id] = e
		c.rules[target] = id
		return eCall(id), nil
	}
	return e, nil
}

// ruleFor makes target a rule (once) and compiles its body.
func (c *schemaCompiler) ruleFor(target *jv, name string) int {
	if id, ok := c.rules[target]; ok {
		return id
	}
	id := c.b.rule(name)
	c.rules[target] = id
	c.inlining[target]++
	depth := c.depth
	c.depth = 0
	e, err := c.compile(target, name)
	c.depth = depth
	c.inlining[target]--
	if err != nil {
		// reported where the target is compiled inline too
		e = none
	}
	c.b.bodies[id] = e
	return id
}

// resolve follows a JSON pointer within the schema document.
func (c *schemaCompiler) resolve(ref string) (*jv, error) {
	if !strings.HasPrefix(ref, "#") {
		return nil, errors.New("only references within the schema (#…) are supported")
	}
	n := c.root
	p := ref[1:]
	if p == "" {
		return n, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, errors.New("only JSON pointers (#/…) are supported, not anchors")
	}
	for _, tok := range strings.Split(p[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch n.kind {
		case 'o':
			n = n.get(tok)
		case 'a':
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.arr) {
				return nil, errors.New("no such item")
			}
			n = n.arr[i]
		default:
			n = nil
		}
		if n == nil {
			return nil, errors.New("points at nothing")
		}
	}
	return n, nil
}

// enum compiles enum or const: the values written compactly, those of the
// allowed types.
func (c *schemaCompiler) enum(n *jv, types, cons []string, path string) (expr, error) {
	for _, k := range cons {
		if k != "enum" && k != "const" && k != "type" {
			return nil, schemaError(path, "keyword %q beside enum or const is not supported", k)
		}
	}
	var vals []*jv
	if e := n.get("enum"); e != nil {
		if e.kind != 'a' {
			return nil, schemaError(path, "enum must be an array")
		}
		vals = e.arr
	}
	if k := n.get("const"); k != nil {
		if n.get("enum") != nil {
			return nil, schemaError(path, "keyword \"const\" beside \"enum\" is not supported")
		}
		vals = []*jv{k}
	}
	var alts []expr
	for _, v := range vals {
		if !typeOK(v, types) {
			continue
		}
		alts = append(alts, eLit(string(v.compact(nil))))
	}
	if len(alts) == 0 {
		return nil, schemaError(path, "no value of the enum has the schema's type")
	}
	return alt(alts...), nil
}

func typeOK(v *jv, types []string) bool {
	for _, t := range types {
		switch {
		case t == "any",
			t == "null" && v.kind == 'n',
			t == "boolean" && v.kind == 'b',
			t == "number" && v.kind == 'f',
			t == "integer" && v.kind == 'f' && isIntegral(v),
			t == "string" && v.kind == 's',
			t == "array" && v.kind == 'a',
			t == "object" && v.kind == 'o':
			return true
		}
	}
	return false
}

func isIntegral(v *jv) bool {
	f, ok := v.float()
	return ok && !math.IsInf(f, 0) && f == math.Trunc(f)
}

// intKeyword reads a non-negative integer keyword; -1 when absent.
func intKeyword(n *jv, k, path string) (int, error) {
	v := n.get(k)
	if v == nil {
		return -1, nil
	}
	f, ok := v.float()
	if !ok || f < 0 || f != math.Trunc(f) {
		return 0, schemaError(path, "%s must be a non-negative integer", k)
	}
	if f > math.MaxInt32 {
		return math.MaxInt32, nil
	}
	return int(f), nil
}

// Strings.

// maxGenLength caps the characters written for a string with maxLength.
const maxGenLength = 256

// maxMinLength is the largest minLength (or minItems) compiled.
const maxMinLength = 1000

func (c *schemaCompiler) str(n *jv, path string) (expr, error) {
	minL, err := intKeyword(n, "minLength", path)
	if err != nil {
		return nil, err
	}
	maxL, err := intKeyword(n, "maxLength", path)
	if err != nil {
		return nil, err
	}
	var parts []expr
	if p := n.get("pattern"); p != nil {
		if p.kind != 's' {
			return nil, schemaError(path, "pattern must be a string")
		}
		e, err := compileRegex(p.str, regexOpts{escaped: true, search: true})
		if err != nil {
			return nil, schemaError(path, "%v", err)
		}
		parts = append(parts, e)
	}
	if f := n.get("format"); f != nil {
		if f.kind != 's' {
			return nil, schemaError(path, "format must be a string")
		}
		re, ok := formats[f.str]
		if !ok {
			return nil, schemaError(path, "format %q is not supported (supported: %s)", f.str, strings.Join(formatNames(), ", "))
		}
		e, err := compileRegex(re, regexOpts{escaped: true})
		if err != nil {
			panic(err)
		}
		parts = append(parts, e)
	}
	if minL > 0 || maxL >= 0 {
		if minL > maxMinLength {
			return nil, schemaError(path, "minLength over %d is not supported", maxMinLength)
		}
		if maxL >= 0 && maxL < minL {
			return nil, schemaError(path, "maxLength %d is below minLength %d", maxL, minL)
		}
		ch := jsonChar()
		hi := -1
		if maxL >= 0 {
			hi = min(maxL, max(minL, maxGenLength))
			// one UTF-16 unit each, so JavaScript's length agrees
			ch = classExpr([]runeRange{{0, 0xFFFF}}, true)
		}
		parts = append(parts, rep(ch, max(minL, 0), hi))
	}
	var content expr
	switch len(parts) {
	case 0:
		content = rep(jsonChar(), 0, -1)
	case 1:
		content = parts[0]
	default:
		d, err := toByteDFA(parts[0])
		for _, p := range parts[1:] {
			if err != nil {
				break
			}
			var d2 *byteDFA
			if d2, err = toByteDFA(p); err == nil {
				d, err = intersect(d, d2)
			}
		}
		if err != nil {
			return nil, schemaError(path, "string constraints %v", ErrTooLarge)
		}
		if d.isEmpty() {
			return nil, schemaError(path, "no string satisfies pattern, format and length together")
		}
		content = eDFA{d}
	}
	return seq(eLit(`"`), content, eLit(`"`)), nil
}

// formats are the string formats generated, as patterns no stricter
// validator refuses (no leap days or seconds, RFC 4122 uuids, plain
// e-mail addresses).
var formats = map[string]string{
	"date":      dateRE,
	"time":      timeRE,
	"date-time": dateRE + "T" + timeRE,
	"uuid":      `[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}`,
	"email":     `[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,}`,
	"hostname":  `[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*`,
	"ipv4":      `(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`,
	"ipv6":      `(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}`,
	"uri":       `https?://[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*(?:/[A-Za-z0-9._~-]*)*`,
	"duration":  `P(?:[0-9]+W|[0-9]+D|T[0-9]+[HMS])`,
}

const (
	dateRE = `[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))`
	timeRE = `(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`
)

func formatNames() []string {
	var out []string
	for k := range formats {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Numbers.

// maxInt is the largest magnitude written (15 digits: exact in a float64).
const maxInt = 999_999_999_999_999

func (c *schemaCompiler) number(n *jv, integer bool, path string) (expr, error) {
	if m := n.get("multipleOf"); m != nil {
		if f, ok := m.float(); !ok || !integer || f != 1 {
			return nil, schemaError(path, "keyword %q is not supported", "multipleOf")
		}
	}
	lo, hi := math.Inf(-1), math.Inf(1)
	exLo, exHi := false, false
	bound := func(k string) (float64, bool, error) {
		v := n.get(k)
		if v == nil {
			return 0, false, nil
		}
		if v.kind == 'b' { // draft 4: a flag on minimum/maximum
			return 0, false, nil
		}
		f, ok := v.float()
		if !ok || math.IsNaN(f) {
			return 0, false, schemaError(path, "%s must be a number", k)
		}
		return f, true, nil
	}
	if f, ok, err := bound("minimum"); err != nil {
		return nil, err
	} else if ok {
		lo = f
	}
	if f, ok, err := bound("maximum"); err != nil {
		return nil, err
	} else if ok {
		hi = f
	}
	if f, ok, err := bound("exclusiveMinimum"); err != nil {
		return nil, err
	} else if ok && f >= lo {
		lo, exLo = f, true
	}
	if f, ok, err := bound("exclusiveMaximum"); err != nil {
		return nil, err
	} else if ok && f <= hi {
		hi, exHi = f, true
	}
	if v := n.get("exclusiveMinimum"); v != nil && v.kind == 'b' && v.b {
		exLo = true
	}
	if v := n.get("exclusiveMaximum"); v != nil && v.kind == 'b' && v.b {
		exHi = true
	}
	if math.IsInf(lo, -1) && math.IsInf(hi, 1) {
		if integer {
			return jsonInteger(), nil
		}
		return jsonNumber(), nil
	}
	// the integers in range
	kLo, kHi := math.Ceil(lo), math.Floor(hi)
	if exLo && kLo == lo {
		kLo++
	}
	if exHi && kHi == hi {
		kHi--
	}
	var alts []expr
	if e := intRange(kLo, kHi); e != nil {
		alts = append(alts, e)
	}
	if !integer {
		// k.f for k ≥ 0 lies in [k, k+1): in range when kLo ≤ k and k+1 ≤ hi
		if e := natRange(math.Max(kLo, 0), math.Floor(hi)-1); e != nil {
			alts = append(alts, seq(e, fraction()))
		}
		// -k.f lies in (-(k+1), -k]: in range when lo ≤ -(k+1) and -k ≤ kHi
		if e := natRange(math.Max(-kHi, 0), math.Floor(-lo)-1); e != nil {
			alts = append(alts, seq(eLit("-"), e, fraction()))
		}
		// an exclusive integral bound: its k.f with a fraction above zero
		// (exclusiveMinimum 0 allows 0.5)
		if exLo && lo == math.Trunc(lo) && lo >= 0 && lo+1 <= hi {
			if e := natRange(lo, lo); e != nil {
				alts = append(alts, seq(e, nonZeroFraction()))
			}
		}
		if exHi && hi == math.Trunc(hi) && hi <= 0 && hi-1 >= lo {
			if e := natRange(-hi, -hi); e != nil {
				alts = append(alts, seq(eLit("-"), e, nonZeroFraction()))
			}
		}
	}
	if len(alts) == 0 {
		return nil, schemaError(path, "no number with at most %d digits lies within minimum/maximum", maxDigits)
	}
	return alt(alts...), nil
}

// intRange is the integers in [lo, hi] (bounds may be infinite) of at most
// maxDigits digits, or nil.
func intRange(lo, hi float64) expr {
	lo, hi = math.Max(lo, -maxInt), math.Min(hi, maxInt)
	if lo > hi {
		return nil
	}
	var alts []expr
	if lo < 0 {
		if e := natRange(math.Max(-hi, 1), -lo); e != nil {
			alts = append(alts, seq(eLit("-"), e))
		}
	}
	if e := natRange(math.Max(lo, 0), hi); e != nil {
		alts = append(alts, e)
	}
	if len(alts) == 0 {
		return nil
	}
	return alt(alts...)
}

// natRange is the decimal forms of the naturals in [lo, hi] (clamped to
// maxInt), or nil.
func natRange(lo, hi float64) expr {
	lo, hi = math.Max(lo, 0), math.Min(hi, maxInt)
	if lo > hi {
		return nil
	}
	a, b := uint64(lo), uint64(hi)
	var alts []expr
	la, lb := len(strconv.FormatUint(a, 10)), len(strconv.FormatUint(b, 10))
	for l := la; l <= lb; l++ {
		x, y := a, b
		if l > la {
			x = pow10(l - 1)
		}
		if l < lb {
			y = pow10(l) - 1
		}
		alts = append(alts, digitsRange(strconv.FormatUint(x, 10), strconv.FormatUint(y, 10)))
	}
	return alt(alts...)
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// digitsRange matches the digit strings of one length between x and y.
func digitsRange(x, y string) expr {
	if len(x) == 0 {
		return empty
	}
	if x == y {
		return eLit(x)
	}
	if x[0] == y[0] {
		return seq(eLit(x[:1]), digitsRange(x[1:], y[1:]))
	}
	rest := len(x) - 1
	zeros, nines := strings.Repeat("0", rest), strings.Repeat("9", rest)
	var alts []expr
	lo, hi := x[0], y[0]
	if x[1:] != zeros {
		alts = append(alts, seq(eLit(x[:1]), digitsRange(x[1:], nines)))
		lo++
	}
	if y[1:] != nines {
		alts = append(alts, seq(eLit(y[:1]), digitsRange(zeros, y[1:])))
		hi--
	}
	if lo <= hi {
		alts = append(alts, seq(byteIn(lo, hi), rep(digit(), rest, rest)))
	}
	return alt(alts...)
}

// Arrays.

// inlineLimit is the NFA size past which repeated parts become rules.
const inlineLimit = 20000

func (c *schemaCompiler) array(n *jv, path string) (expr, error) {
	minI, err := intKeyword(n, "minItems", path)
	if err != nil {
		return nil, err
	}
	maxI, err := intKeyword(n, "maxItems", path)
	if err != nil {
		return nil, err
	}
	minI = max(minI, 0)
	if minI > maxMinLength {
		return nil, schemaError(path, "minItems over %d is not supported", maxMinLength)
	}
	if maxI >= 0 && maxI < minI {
		return nil, schemaError(path, "maxItems %d is below minItems %d", maxI, minI)
	}
	items := n.get("items")
	var prefix []*jv
	if p := n.get("prefixItems"); p != nil {
		if p.kind != 'a' {
			return nil, schemaError(path, "prefixItems must be an array")
		}
		prefix = p.arr
	} else if items != nil && items.kind == 'a' {
		prefix, items = items.arr, nil // draft 7's tuple form
	}
	var pre []expr
	for i, p := range prefix {
		e, err := c.compile(p, fmt.Sprintf("%s/prefixItems/%d", path, i))
		if err != nil {
			return nil, err
		}
		pre = append(pre, e)
	}
	if len(prefix) > 0 {
		// the tuple, whole when it fits, then items for the rest
		if maxI >= 0 && maxI < len(pre) {
			if minI > maxI {
				return nil, schemaError(path, "minItems/maxItems exclude the tuple")
			}
			pre = pre[:maxI]
		}
		var parts []expr
		for i, e := range pre {
			if i > 0 {
				parts = append(parts, eLit(","))
			}
			parts = append(parts, e)
		}
		// then as many items as minItems asks beyond the tuple
		if extra := max(minI-len(pre), 0); extra > 0 {
			if items != nil && items.kind == 'b' && !items.b {
				return nil, schemaError(path, "minItems exceeds the tuple and items is false")
			}
			it, err := c.itemExpr(items, path)
			if err != nil {
				return nil, err
			}
			for range extra {
				if len(parts) > 0 {
					parts = append(parts, eLit(","))
				}
				parts = append(parts, it)
			}
		}
		return seq(eLit("["), seq(parts...), eLit("]")), nil
	}
	if items != nil && items.kind == 'b' && !items.b {
		if minI > 0 {
			return nil, schemaError(path, "minItems is above 0 and items is false")
		}
		return eLit("[]"), nil
	}
	it, err := c.itemExpr(items, path)
	if err != nil {
		return nil, err
	}
	copies := maxI
	if copies < 0 {
		copies = max(minI, 1)
	}
	if it.size()*copies > inlineLimit {
		id := c.b.rule(path + "/items")
		c.b.bodies[id] = it
		it = eCall(id)
	}
	more := seq(eLit(","), it)
	var body expr
	switch {
	case minI == 0 && maxI < 0:
		body = alt(eLit("]"), seq(it, rep(more, 0, -1), eLit("]")))
	case minI == 0:
		body = alt(eLit("]"), seq(it, rep(more, 0, maxI-1), eLit("]")))
	case maxI < 0:
		body = seq(it, rep(more, minI-1, -1), eLit("]"))
	default:
		body = seq(it, rep(more, minI-1, maxI-1), eLit("]"))
	}
	if maxI == 0 {
		body = eLit("]")
	}
	return seq(eLit("["), body), nil
}

func (c *schemaCompiler) itemExpr(items *jv, path string) (expr, error) {
	if items == nil {
		return c.anyValue(), nil
	}
	return c.compile(items, path+"/items")
}

// Objects.

type member struct {
	key      string
	value    expr
	required bool
}

func (c *schemaCompiler) object(n *jv, path string) (expr, error) {
	props := n.get("properties")
	if props != nil && props.kind != 'o' {
		return nil, schemaError(path, "properties must be an object")
	}
	required := map[string]bool{}
	var reqOrder []string
	if r := n.get("required"); r != nil {
		if r.kind != 'a' {
			return nil, schemaError(path, "required must be an array of strings")
		}
		for _, x := range r.arr {
			if x.kind != 's' {
				return nil, schemaError(path, "required must be an array of strings")
			}
			if !required[x.str] {
				required[x.str] = true
				reqOrder = append(reqOrder, x.str)
			}
		}
	}
	addl := n.get("additionalProperties")
	closed := addl != nil && addl.kind == 'b' && !addl.b
	if addl != nil && addl.kind != 'b' && addl.kind != 'o' {
		return nil, schemaError(path, "additionalProperties must be a schema")
	}
	var members []member
	seen := map[string]bool{}
	if props != nil {
		for _, k := range props.keys {
			if seen[k] {
				continue
			}
			p := props.get(k)
			seen[k] = true
			if p.kind == 'b' && !p.b {
				if required[k] {
					return nil, schemaError(path, "required property %q has the schema false", k)
				}
				continue
			}
			e, err := c.compile(p, path+"/properties/"+escapePointer(k))
			if err != nil {
				return nil, err
			}
			members = append(members, member{key: k, value: e, required: required[k]})
		}
	}
	for _, k := range reqOrder {
		if seen[k] {
			continue
		}
		if closed {
			return nil, schemaError(path, "required property %q is not in properties and additionalProperties is false", k)
		}
		var e expr
		if addl != nil && addl.kind == 'o' {
			var err error
			if e, err = c.compile(addl, path+"/additionalProperties"); err != nil {
				return nil, err
			}
		} else {
			e = c.anyValue()
		}
		members = append(members, member{key: k, value: e, required: true})
	}
	if len(members) == 0 {
		switch {
		case closed:
			return eLit("{}"), nil
		case addl != nil && addl.kind == 'o':
			v, err := c.compile(addl, path+"/additionalProperties")
			if err != nil {
				return nil, err
			}
			pair := seq(jsonString(), eLit(":"), v)
			return seq(eLit("{"), alt(eLit("}"), seq(pair, rep(seq(eLit(","), pair), 0, -1), eLit("}")))), nil
		case props == nil:
			return jsonObject(c.valueRule()), nil
		}
		return eLit("{}"), nil
	}
	// Members in order, optional ones skippable: the first member written
	// has no comma before it.
	lead := 0 // how many members may come first: up to the first required
	for lead < len(members) && !members[lead].required {
		lead++
	}
	total := 0
	for _, m := range members {
		total += m.value.size()
	}
	if total*(lead+1) > inlineLimit {
		for i := range members {
			if members[i].value.size() > 16 {
				id := c.b.rule(path + "/properties/" + escapePointer(members[i].key))
				c.b.bodies[id] = members[i].value
				members[i].value = eCall(id)
			}
		}
	}
	kv := func(m member) expr {
		return seq(eLit(string(appendJSONString(nil, m.key))), eLit(":"), m.value)
	}
	tail := func(from int) expr {
		var parts []expr
		for _, m := range members[from:] {
			x := seq(eLit(","), kv(m))
			if !m.required {
				x = opt(x)
			}
			parts = append(parts, x)
		}
		return seq(append(parts, eLit("}"))...)
	}
	var firsts []expr
	for j := 0; j <= lead && j < len(members); j++ {
		firsts = append(firsts, seq(kv(members[j]), tail(j+1)))
	}
	if lead == len(members) {
		firsts = append(firsts, eLit("}"))
	}
	return seq(eLit("{"), alt(firsts...)), nil
}

func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

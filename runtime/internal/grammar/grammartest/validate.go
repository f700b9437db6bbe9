// Package grammartest validates JSON documents against JSON Schemas, for
// the tests of constrained decoding: an implementation of its own (the
// standard library's JSON, regexp, time and net parsers), so a test does
// not check the compiler against itself.
package grammartest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/mail"
	"net/netip"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Validate reports why doc is not valid JSON matching schema, or nil.
func Validate(schema, doc []byte) error {
	var s, d any
	if err := decode(schema, &s); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if err := decode(doc, &d); err != nil {
		return fmt.Errorf("document is not JSON: %w", err)
	}
	v := &validator{root: s}
	return v.check(s, d, "$")
}

func decode(b []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the value")
	}
	return nil
}

type validator struct{ root any }

func (v *validator) check(schema, doc any, at string) error {
	switch s := schema.(type) {
	case bool:
		if !s {
			return fmt.Errorf("%s: the schema false", at)
		}
		return nil
	case map[string]any:
		return v.object(s, doc, at)
	}
	return fmt.Errorf("%s: schema is %T", at, schema)
}

func (v *validator) resolve(ref string) (any, error) {
	n := v.root
	if ref == "#" {
		return n, nil
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := n.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("$ref %s", ref)
		}
		n = m[tok]
	}
	return n, nil
}

func typeOf(d any) string {
	switch x := d.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		if f, err := x.Float64(); err == nil && f == math.Trunc(f) {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "?"
}

func (v *validator) object(s map[string]any, d any, at string) error {
	if ref, ok := s["$ref"].(string); ok {
		t, err := v.resolve(ref)
		if err != nil {
			return err
		}
		return v.check(t, d, at)
	}
	if t, ok := s["type"]; ok {
		var ts []any
		switch t := t.(type) {
		case string:
			ts = []any{t}
		case []any:
			ts = t
		}
		got := typeOf(d)
		ok := false
		for _, x := range ts {
			ok = ok || x == got || (x == "number" && got == "integer")
		}
		if !ok {
			return fmt.Errorf("%s: %s, want type %v", at, got, t)
		}
	}
	if e, ok := s["enum"].([]any); ok {
		found := false
		for _, x := range e {
			found = found || equal(x, d)
		}
		if !found {
			return fmt.Errorf("%s: %v is not in the enum", at, d)
		}
	}
	if c, ok := s["const"]; ok && !equal(c, d) {
		return fmt.Errorf("%s: %v is not the const", at, d)
	}
	if a, ok := s["anyOf"].([]any); ok {
		var errs []string
		for _, x := range a {
			err := v.check(x, d, at)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err.Error())
		}
		if errs != nil {
			return fmt.Errorf("%s: no anyOf branch: %s", at, strings.Join(errs, "; "))
		}
	}
	if a, ok := s["allOf"].([]any); ok {
		for _, x := range a {
			if err := v.check(x, d, at); err != nil {
				return err
			}
		}
	}
	switch x := d.(type) {
	case json.Number:
		return number(s, x, at)
	case string:
		return str(s, x, at)
	case []any:
		return v.array(s, x, at)
	case map[string]any:
		return v.members(s, x, at)
	}
	return nil
}

func equal(a, b any) bool {
	if x, ok := a.(json.Number); ok {
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		fx, _ := x.Float64()
		fy, _ := y.Float64()
		return fx == fy
	}
	return reflect.DeepEqual(a, b)
}

func num(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

func number(s map[string]any, n json.Number, at string) error {
	f, err := n.Float64()
	if err != nil {
		return fmt.Errorf("%s: %v", at, err)
	}
	if m, ok := num(s["minimum"]); ok && f < m {
		return fmt.Errorf("%s: %v < minimum %v", at, f, m)
	}
	if m, ok := num(s["maximum"]); ok && f > m {
		return fmt.Errorf("%s: %v > maximum %v", at, f, m)
	}
	if m, ok := num(s["exclusiveMinimum"]); ok && f <= m {
		return fmt.Errorf("%s: %v ≤ exclusiveMinimum %v", at, f, m)
	}
	if m, ok := num(s["exclusiveMaximum"]); ok && f >= m {
		return fmt.Errorf("%s: %v ≥ exclusiveMaximum %v", at, f, m)
	}
	if m, ok := num(s["multipleOf"]); ok && math.Mod(f, m) != 0 {
		return fmt.Errorf("%s: %v is not a multiple of %v", at, f, m)
	}
	return nil
}

var formatRE = map[string]*regexp.Regexp{
	"uuid":     regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`),
	"hostname": regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$`),
	"duration": regexp.MustCompile(`^P(\d+W|(\d+Y)?(\d+M)?(\d+D)?(T(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?)$`),
}

func format(f, x string) error {
	var err error
	switch f {
	case "date":
		_, err = time.Parse("2006-01-02", x)
	case "time":
		_, err = time.Parse("15:04:05.999999999Z07:00", x)
	case "date-time":
		_, err = time.Parse(time.RFC3339Nano, x)
	case "email":
		var a *mail.Address
		if a, err = mail.ParseAddress(x); err == nil && a.Address != x {
			err = fmt.Errorf("not a bare address")
		}
	case "ipv4":
		var a netip.Addr
		if a, err = netip.ParseAddr(x); err == nil && !a.Is4() {
			err = fmt.Errorf("not IPv4")
		}
	case "ipv6":
		var a netip.Addr
		if a, err = netip.ParseAddr(x); err == nil && !a.Is6() {
			err = fmt.Errorf("not IPv6")
		}
	case "uri":
		var u *url.URL
		if u, err = url.Parse(x); err == nil && (u.Scheme == "" || u.Host == "") {
			err = fmt.Errorf("no scheme or host")
		}
	default:
		re := formatRE[f]
		if re == nil {
			return fmt.Errorf("format %q unknown to the validator", f)
		}
		if x != "" && x[0] == 'P' && strings.HasSuffix(x, "T") || x == "P" {
			return fmt.Errorf("empty duration")
		}
		if !re.MatchString(x) {
			err = fmt.Errorf("does not match")
		}
	}
	return err
}

func str(s map[string]any, x string, at string) error {
	n := utf8.RuneCountInString(x)
	if m, ok := num(s["minLength"]); ok && float64(n) < m {
		return fmt.Errorf("%s: %d characters < minLength %v", at, n, m)
	}
	if m, ok := num(s["maxLength"]); ok && float64(n) > m {
		return fmt.Errorf("%s: %d characters > maxLength %v", at, n, m)
	}
	if p, ok := s["pattern"].(string); ok {
		re, err := regexp.Compile(p)
		if err != nil {
			return fmt.Errorf("%s: pattern %q: %v", at, p, err)
		}
		if !re.MatchString(x) {
			return fmt.Errorf("%s: %q does not match %q", at, x, p)
		}
	}
	if f, ok := s["format"].(string); ok {
		if err := format(f, x); err != nil {
			return fmt.Errorf("%s: %q is not a %s: %v", at, x, f, err)
		}
	}
	return nil
}

func (v *validator) array(s map[string]any, a []any, at string) error {
	if m, ok := num(s["minItems"]); ok && float64(len(a)) < m {
		return fmt.Errorf("%s: %d items < minItems %v", at, len(a), m)
	}
	if m, ok := num(s["maxItems"]); ok && float64(len(a)) > m {
		return fmt.Errorf("%s: %d items > maxItems %v", at, len(a), m)
	}
	if u, ok := s["uniqueItems"].(bool); ok && u {
		for i := range a {
			for j := range i {
				if equal(a[i], a[j]) {
					return fmt.Errorf("%s: items %d and %d are equal", at, j, i)
				}
			}
		}
	}
	var prefix []any
	items := s["items"]
	if p, ok := s["prefixItems"].([]any); ok {
		prefix = p
	} else if p, ok := items.([]any); ok {
		prefix, items = p, s["additionalItems"]
	}
	for i, x := range a {
		w := fmt.Sprintf("%s[%d]", at, i)
		switch {
		case i < len(prefix):
			if err := v.check(prefix[i], x, w); err != nil {
				return err
			}
		case items != nil:
			if err := v.check(items, x, w); err != nil {
				return err
			}
		}
	}
	return nil
}

func (v *validator) members(s map[string]any, o map[string]any, at string) error {
	props, _ := s["properties"].(map[string]any)
	if req, ok := s["required"].([]any); ok {
		for _, r := range req {
			if _, ok := o[r.(string)]; !ok {
				return fmt.Errorf("%s: no required property %q", at, r)
			}
		}
	}
	for k, x := range o {
		w := at + "." + strconv.Quote(k)
		if p, ok := props[k]; ok {
			if err := v.check(p, x, w); err != nil {
				return err
			}
			continue
		}
		if a, ok := s["additionalProperties"]; ok {
			if err := v.check(a, x, w); err != nil {
				return fmt.Errorf("%s: additional property: %w", w, err)
			}
		}
	}
	return nil
}

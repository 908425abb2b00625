/**
 * The label selector as apimachinery v0.37 parses and matches it (`src/internal/labelSelector.ts`):
 * the rows are `k8s.io/apimachinery/pkg/labels/selector_test.go`'s (TestSelectorParse,
 * TestSetSelectorParser, TestSelectorMatches, TestRequirementSelectorMatching) plus the cases where
 * this parser once disagreed with it. test/apiserver/differential.test.ts runs the same strings
 * against both real kube-apiservers.
 */
import { Either } from "effect"
import { describe, expect, it } from "vitest"
import type { LabelRequirement } from "../src/internal/labelSelector.ts"
import { matchesLabels, parseLabelSelector } from "../src/internal/labelSelector.ts"

/** A requirement as apimachinery's `String()` writes it, so a row reads like the selector. */
const written = (r: LabelRequirement): string => {
  switch (r.op) {
    case "exists":
      return r.key
    case "notExists":
      return `!${r.key}`
    case "in":
      return r.values.length === 1 ? `${r.key}=${r.values[0]}` : `${r.key} in (${r.values.join(",")})`
    case "notIn":
      return r.values.length === 1 ? `${r.key}!=${r.values[0]}` : `${r.key} notin (${r.values.join(",")})`
    case "gt":
      return `${r.key}>${r.value}`
    case "lt":
      return `${r.key}<${r.value}`
  }
}
const parsed = (selector: string) =>
  Either.match(parseLabelSelector(selector), {
    onLeft: (e) => ({ refused: e.message }),
    onRight: (s) => ({ requirements: s.requirements.map(written) })
  })

describe("parseLabelSelector, as apimachinery", () => {
  it.each([
    ["x=a,y=b,z=c", ["x=a", "y=b", "z=c"]],
    ["", []],
    ["x!=a,y=b", ["x!=a", "y=b"]],
    ["x=", ["x="]],
    ["x= ", ["x="]],
    ["x=,z= ", ["x=", "z="]],
    ["x= ,z= ", ["x=", "z="]],
    ["!x", ["!x"]],
    ["x>1", ["x>1"]],
    ["x>1,z<5", ["x>1", "z<5"]],
    ["\rx", ["x"]],
    ["this-is-a-dns.domain.com/key-with-dash", ["this-is-a-dns.domain.com/key-with-dash"]],
    ["this-is-another-dns.domain.com/key-with-dash in (so,what)", [
      "this-is-another-dns.domain.com/key-with-dash in (so,what)"
    ]],
    ["0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)", ["0.1.2.domain/99 notin (10.10.100.1,tick.tack.clock)"]],
    ["foo  in\t (abc)", ["foo=abc"]],
    ["x notin\n (abc)", ["x!=abc"]],
    ["x  notin\t\t\t(abc,def)", ["x notin (abc,def)"]],
    ["x in (abc,)", ["x in (,abc)"]],
    ["x in ()", ["x="]],
    ["x notin (abc,,def),bar,z in (),w", ["x notin (,abc,def)", "bar", "z=", "w"]],
    ["x,y in (a)", ["x", "y=a"]],
    ["x<7", ["x<7"]],
    ["x=a,y!=b,z in (h,i,j)", ["x=a", "y!=b", "z in (h,i,j)"]],
    ["x notin ( )", ["x!="]],
    ["x notin (, a)", ["x notin (,a)"]],
    ["a ", ["a"]],
    ["a in (x,y,notin, z,in)", ["a in (in,notin,x,y,z)"]],
    ["notin=in", ["notin=in"]],
    // `in` and `notin` are ordinary words where a key or a value stands.
    ["env=in", ["env=in"]],
    ["env in (in,notin)", ["env in (in,notin)"]],
    ["in=x", ["in=x"]],
    ["!in", ["!in"]],
    ["a notin (in)", ["a!=in"]],
    // Values are a set: repeated values count once, in order.
    ["a in (b,a,b)", ["a in (a,b)"]],
    // v0.37 reads `,,` as the empty value without consuming the second comma (1.20 consumed it and refused this).
    ["a in (b,,)", ["a in (,b)"]],
    ["a>9223372036854775807", ["a>9223372036854775807"]]
  ])("%j is accepted as %j", (selector, requirements) => {
    expect(parsed(selector)).toEqual({ requirements })
  })

  const labelValueRule =
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
  const integerRule = "for 'Gt', 'Lt' operators, the value must be an integer"
  it.each([
    ["x=a||y=b", `unable to parse requirement: values[0][x]: Invalid value: "a||y": ${labelValueRule}`],
    ["x==a==b", "found '==', expected: ',' or 'end of string'"],
    ["!x=a", "found '=', expected: ',' or 'end of string'"],
    ["x<a", `unable to parse requirement: values[0]: Invalid value: "a": ${integerRule}`],
    ["x,,y", "found ',', expected: identifier after ','"],
    [",x,y", "found ',', expected: !, identifier, or 'end of string'"],
    ["x nott in (y)", "unable to parse requirement: found 'nott', expected: in, notin, =, ==, !=, gt, lt"],
    ["a in (xyz),", "found '', expected: identifier after ','"],
    ["a in (xyz)b notin ()", "found 'b', expected: ',' or 'end of string'"],
    ["a in (xyz abc)", "unable to parse requirement: found 'abc', expected: ',' or ')'"],
    ["a notin(", "unable to parse requirement: found '', expected: ',', ')' or identifier"],
    ["a (", "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt"],
    ["(", "found '(', expected: !, identifier, or 'end of string'"],
    ["env in prod", "unable to parse requirement: found 'prod' expected: '('"],
    ["a in (b,=)", "unable to parse requirement: found '=', expected: ',', or identifier"],
    // An integer is still a label value: a sign is not allowed, and it must fit in an int64.
    ["a>-5", `unable to parse requirement: values[0][a]: Invalid value: "-5": ${labelValueRule}`],
    [
      "a>9223372036854775808",
      `unable to parse requirement: values[0]: Invalid value: "9223372036854775808": ${integerRule}`
    ],
    [
      "a>b.",
      `unable to parse requirement: [values[0]: Invalid value: "b.": ${integerRule}, values[0][a]: Invalid value: "b.": ${labelValueRule}]`
    ],
    [
      "a/b/c",
      "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
    ],
    [
      `a=${"v".repeat(64)}`,
      `unable to parse requirement: values[0][a]: Invalid value: "${"v".repeat(64)}": must be no more than 63 bytes`
    ],
    [
      `${"k".repeat(64)}`,
      `unable to parse requirement: <nil>: Invalid value: "${"k".repeat(64)}": name part must be no more than 63 bytes`
    ]
  ])("%j is refused: %s", (selector, refused) => {
    expect(parsed(selector)).toEqual({ refused })
  })
})

describe("matchesLabels, as apimachinery", () => {
  const matches = (selector: string, labels: Record<string, string>) =>
    matchesLabels(Either.getOrThrow(parseLabelSelector(selector)), labels)
  it.each([
    ["", { x: "y" }, true],
    ["x=y", { x: "y" }, true],
    ["x=y,z=w", { x: "y", z: "w" }, true],
    ["x!=y,z!=w", { x: "z", z: "a" }, true],
    ["notin=in", { notin: "in" }, true],
    ["x", { x: "z" }, true],
    ["!x", { y: "z" }, true],
    ["x>1", { x: "2" }, true],
    ["x<1", { x: "0" }, true],
    ["x=z", {}, false],
    ["x=y", { x: "z" }, false],
    ["x=y,z=w", { x: "w", z: "w" }, false],
    ["x!=y,z!=w", { x: "z", z: "w" }, false],
    ["x", { y: "z" }, false],
    ["!x", { x: "z" }, false],
    ["x>1", { x: "0" }, false],
    ["x<1", { x: "2" }, false],
    ["foo=bar,baz=blah", { foo: "bar", baz: "blah" }, true],
    ["foo=bar,foobar=bar,baz=blah", { foo: "bar", baz: "blah" }, false],
    ["x in (foo),y notin (alpha)", { x: "foo", y: "baz" }, true],
    ["x in (foo),y in (alpha)", { x: "foo", y: "baz" }, false],
    ["x notin (),y", { y: "" }, true],
    ["!x,y", { y: "" }, true],
    ["x notin (),!y", { y: "" }, false],
    ["x in ()", { y: "baz" }, false],
    ["z>1", { z: "2" }, true],
    ["z>1", { z: "v2" }, false],
    // Compared as int64, not as a JavaScript number (both of these are 2^53 as a double).
    ["a>9007199254740992", { a: "9007199254740993" }, true],
    ["a<9007199254740993", { a: "9007199254740992" }, true],
    // A label beyond int64 is not an integer, so it matches neither way.
    ["a<9223372036854775807", { a: "9223372036854775808" }, false],
    ["a>1", { a: "9223372036854775808" }, false]
  ])("%j on %j: %s", (selector, labels, expected) => {
    expect(matches(selector, labels)).toBe(expected)
  })
})

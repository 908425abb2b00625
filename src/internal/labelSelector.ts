/**
 * Label and field selectors as the apiserver parses and applies them: the grammar of
 * `k8s.io/apimachinery/pkg/labels` (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`, `>`, `<`,
 * comma = AND) and of `fields` (`=`, `==`, `!=` on `metadata.name` / `metadata.namespace`, the
 * only fields a custom resource may be selected by). Used by the simulated apiserver and to check
 * the program's `--selector`. Texts are apimachinery v0.37's; where 1.20's differ,
 * test/apiserver/differential.test.ts says so.
 * @internal
 */
import { Either } from "effect"

/** One parsed requirement of a label selector. */
export type LabelRequirement =
  | { readonly op: "exists" | "notExists"; readonly key: string }
  | { readonly op: "in" | "notIn"; readonly key: string; readonly values: ReadonlyArray<string> }
  | { readonly op: "gt" | "lt"; readonly key: string; readonly value: bigint }

/** A parsed label selector: every requirement must hold (an empty one selects everything). */
export interface LabelSelector {
  readonly requirements: ReadonlyArray<LabelRequirement>
}

/** Why a selector string was refused, in the apiserver's words. */
export interface SelectorParseError {
  readonly message: string
}

type TokenKind =
  | "identifier"
  | "in"
  | "notin"
  | "("
  | ")"
  | ","
  | "!"
  | "="
  | "=="
  | "!="
  | ">"
  | "<"
  | "end"

/** A token and its text: the text is what an error quotes (`""` at the end of the string). */
interface Token {
  readonly kind: TokenKind
  readonly text: string
}

const keywords: ReadonlyMap<string, TokenKind> = new Map<string, TokenKind>([
  [")", ")"],
  [",", ","],
  ["!", "!"],
  ["==", "=="],
  ["=", "="],
  [">", ">"],
  ["in", "in"],
  ["<", "<"],
  ["!=", "!="],
  ["notin", "notin"],
  ["(", "("]
])
const isSpecial = (ch: string) =>
  ch === "=" || ch === "!" || ch === "(" || ch === ")" || ch === "," || ch === ">" || ch === "<"
const isSpace = (ch: string) => ch === " " || ch === "\t" || ch === "\r" || ch === "\n"

/** apimachinery's lexer: the longest operator among special characters, else a word up to one. */
const tokenize = (input: string): Array<Token> => {
  const tokens: Array<Token> = []
  let i = 0
  for (;;) {
    while (i < input.length && isSpace(input[i]!)) i++
    if (i >= input.length) break
    let j = i
    if (isSpecial(input[i]!)) {
      let longest = 0
      while (j < input.length && isSpecial(input[j]!)) {
        j++
        if (keywords.has(input.slice(i, j))) longest = j - i
        else if (longest > 0) break
      }
      j = i + longest
    } else {
      while (j < input.length && !isSpecial(input[j]!) && !isSpace(input[j]!)) j++
    }
    const text = input.slice(i, j)
    tokens.push({ kind: keywords.get(text) ?? "identifier", text })
    i = j
  }
  tokens.push({ kind: "end", text: "" })
  return tokens
}

const labelKeyFormat = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
const labelKeyPattern = new RegExp(`^${labelKeyFormat}$`)
const labelValueFormat = `(${labelKeyFormat})?`
const labelValuePattern = new RegExp(`^${labelValueFormat}$`)
const dns1123SubdomainFormat = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
const dns1123SubdomainPattern = new RegExp(`^${dns1123SubdomainFormat}$`)
const labelKeyRule =
  "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"

/** apimachinery's `RegexError`: the rule, its examples and the regex it was checked with. */
const regexError = (rule: string, format: string, ...examples: ReadonlyArray<string>) =>
  `${rule} (e.g. ${examples.map((e) => `'${e}', `).join(" or ")}regex used for validation is '${format}')`
const maxLength = (n: number) => `must be no more than ${n} bytes`
const byteLength = (text: string) => Buffer.byteLength(text, "utf8")

/** `content.IsLabelKey` of apimachinery 0.37: every problem of a key, or none. */
const labelKeyProblems = (key: string): Array<string> => {
  const problems: Array<string> = []
  const parts = key.split("/")
  if (parts.length > 2) {
    return [
      `a valid label key ${
        regexError(labelKeyRule, labelKeyFormat, "MyName", "my.name", "123-abc")
      } with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')`
    ]
  }
  const name = parts.length === 1 ? parts[0]! : parts[1]!
  if (parts.length === 2) {
    const prefix = parts[0]!
    if (prefix.length === 0) problems.push("prefix part must be non-empty")
    else {
      if (byteLength(prefix) > 253) problems.push(`prefix part ${maxLength(253)}`)
      if (!dns1123SubdomainPattern.test(prefix)) {
        problems.push(`prefix part ${
          regexError(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            dns1123SubdomainFormat,
            "example.com"
          )
        }`)
      }
    }
  }
  if (name.length === 0) problems.push("name part must be non-empty")
  else if (byteLength(name) > 63) problems.push(`name part ${maxLength(63)}`)
  if (!labelKeyPattern.test(name)) {
    problems.push(`name part ${regexError(labelKeyRule, labelKeyFormat, "MyName", "my.name", "123-abc")}`)
  }
  return problems
}

/** `content.IsLabelValue`: every problem of a value, or none. */
const labelValueProblems = (value: string): Array<string> => {
  const problems: Array<string> = []
  if (byteLength(value) > 63) problems.push(maxLength(63))
  if (!labelValuePattern.test(value)) {
    problems.push(
      regexError(
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        labelValueFormat,
        "MyValue",
        "my_value",
        "12345"
      )
    )
  }
  return problems
}

/** A `field.Invalid` error's text: where, the bad value quoted, what is wrong. */
const invalid = (path: string, value: string, detail: string) =>
  `${path}: Invalid value: ${JSON.stringify(value)}: ${detail}`

/** Go's `strconv.ParseInt(text, 10, 64)`: a signed decimal within int64, else undefined. */
const int64Min = -(2n ** 63n)
const int64Max = 2n ** 63n - 1n
export const parseInt64 = (text: string): bigint | undefined => {
  if (!/^[+-]?[0-9]+$/.test(text)) return undefined
  const n = BigInt(text)
  return n < int64Min || n > int64Max ? undefined : n
}

class ParseFailure {
  constructor(readonly message: string) {}
}

/**
 * Parses a label selector as apimachinery's `labels.Parse` does (v0.37): the same lexer, the same
 * recursive descent (where `in` and `notin` are plain words in a key or value position), the same
 * validation of keys, values and integers, the same texts. `""` selects everything; anything the
 * apiserver refuses (with 400 BadRequest) is a `Left` with its reason.
 */
export const parseLabelSelector = (input: string): Either.Either<LabelSelector, SelectorParseError> => {
  const tokens = tokenize(input)
  let pos = 0
  const fail = (message: string): never => {
    throw new ParseFailure(message)
  }
  // In a value (or key) position `in` and `notin` are words: `env=in`, `in=x`, `a notin (in)`.
  const asValue = (token: Token): Token =>
    token.kind === "in" || token.kind === "notin" ? { kind: "identifier", text: token.text } : token
  const lookahead = () => asValue(tokens[pos]!)
  const consume = () => asValue(tokens[pos++]!)
  const consumeOperator = () => tokens[pos++]!

  const identifierList = (values: Set<string>): void => {
    for (;;) {
      const token = consume()
      if (token.kind === "identifier") {
        values.add(token.text)
        const after = lookahead()
        if (after.kind === ",") continue
        if (after.kind === ")") return
        fail(`found '${after.text}', expected: ',' or ')'`)
      } else if (token.kind === ",") {
        // `(,` and `,)` and `,,` each stand for the empty value.
        if (values.size === 0) values.add("")
        const after = lookahead()
        if (after.kind === ")") {
          values.add("")
          return
        }
        if (after.kind === ",") values.add("")
      } else {
        fail(`found '${token.text}', expected: ',', or identifier`)
      }
    }
  }
  const valueSet = (): Set<string> => {
    const open = consume()
    if (open.kind !== "(") fail(`found '${open.text}' expected: '('`)
    const first = lookahead()
    if (first.kind === "identifier" || first.kind === ",") {
      const values = new Set<string>()
      identifierList(values)
      consume() // the `)` that ended the list
      return values
    }
    if (first.kind === ")") {
      consume()
      return new Set([""])
    }
    return fail(`found '${first.text}', expected: ',', ')' or identifier`)
  }
  const exactValue = (): string => {
    const next = lookahead()
    if (next.kind === "end" || next.kind === ",") return ""
    const token = consume()
    return token.kind === "identifier" ? token.text : fail(`found '${token.text}', expected: identifier`)
  }
  /** `NewRequirement`'s checks of the values, every problem reported at once as apimachinery aggregates. */
  const checked = (key: string, op: "in" | "notIn" | "gt" | "lt", values: ReadonlyArray<string>): Array<string> => {
    const problems: Array<string> = []
    if ((op === "gt" || op === "lt")) {
      values.forEach((v, i) => {
        if (parseInt64(v) === undefined) {
          problems.push(invalid(`values[${i}]`, v, "for 'Gt', 'Lt' operators, the value must be an integer"))
        }
      })
    }
    values.forEach((v, i) => {
      const found = labelValueProblems(v)
      if (found.length > 0) problems.push(invalid(`values[${i}][${key}]`, v, found.join("; ")))
    })
    return problems
  }
  const requirement = (): LabelRequirement => {
    let token = consume()
    const negated = token.kind === "!"
    if (negated) token = consume()
    if (token.kind !== "identifier") return fail(`found '${token.text}', expected: identifier`)
    const key = token.text
    const keyProblems = labelKeyProblems(key)
    if (keyProblems.length > 0) fail(invalid("<nil>", key, keyProblems.join("; ")))
    const after = lookahead().kind
    if (negated) return { op: "notExists", key }
    if (after === "end" || after === ",") return { op: "exists", key }
    const operator = consumeOperator()
    let op: "in" | "notIn" | "gt" | "lt"
    let values: Array<string>
    switch (operator.kind) {
      case "in":
      case "notin":
        op = operator.kind === "in" ? "in" : "notIn"
        values = [...valueSet()].sort()
        break
      case "=":
      case "==":
      case "!=":
        op = operator.kind === "!=" ? "notIn" : "in"
        values = [exactValue()]
        break
      case ">":
      case "<":
        op = operator.kind === ">" ? "gt" : "lt"
        values = [exactValue()]
        break
      default:
        return fail(`found '${operator.text}', expected: in, notin, =, ==, !=, gt, lt`)
    }
    const problems = [...new Set(checked(key, op, values))]
    if (problems.length === 1) fail(problems[0]!)
    if (problems.length > 1) fail(`[${problems.join(", ")}]`)
    return op === "gt" || op === "lt" ? { op, key, value: parseInt64(values[0]!)! } : { op, key, values }
  }

  const requirements: Array<LabelRequirement> = []
  try {
    for (;;) {
      const next = lookahead()
      if (next.kind === "end") return Either.right({ requirements })
      if (next.kind !== "identifier" && next.kind !== "!") {
        return fail(`found '${next.text}', expected: !, identifier, or 'end of string'`)
      }
      try {
        requirements.push(requirement())
      } catch (error) {
        if (error instanceof ParseFailure) fail(`unable to parse requirement: ${error.message}`)
        throw error
      }
      const separator = consume()
      if (separator.kind === "end") return Either.right({ requirements })
      if (separator.kind !== ",") fail(`found '${separator.text}', expected: ',' or 'end of string'`)
      const following = lookahead()
      if (following.kind !== "identifier" && following.kind !== "!") {
        fail(`found '${following.text}', expected: identifier after ','`)
      }
    }
  } catch (error) {
    if (error instanceof ParseFailure) return Either.left({ message: error.message })
    throw error
  }
}

/**
 * Whether labels satisfy every requirement. `!=` and `notin` hold for a label that is absent;
 * `>` and `<` compare as int64, and a label that is not one never matches.
 */
export const matchesLabels = (
  selector: LabelSelector,
  labels: Readonly<Record<string, string>> | undefined
): boolean =>
  selector.requirements.every((req) => {
    const has = labels !== undefined && Object.prototype.hasOwnProperty.call(labels, req.key)
    const value = has ? labels[req.key] : undefined
    switch (req.op) {
      case "exists":
        return has
      case "notExists":
        return !has
      case "in":
        return has && req.values.includes(value!)
      case "notIn":
        return !has || !req.values.includes(value!)
      case "gt":
      case "lt": {
        const n = has ? parseInt64(value!) : undefined
        if (n === undefined) return false
        return req.op === "gt" ? n > req.value : n < req.value
      }
    }
  })

/** One term of a field selector. */
export interface FieldRequirement {
  readonly field: "metadata.name" | "metadata.namespace"
  readonly op: "=" | "!="
  readonly value: string
}

export interface FieldSelector {
  readonly requirements: ReadonlyArray<FieldRequirement>
}

/** Splits on an unescaped `sep`; `\` escapes `\`, `,` and `=` as in apimachinery's `fields`. */
const splitTerms = (input: string): Array<string> => {
  const terms: Array<string> = []
  let current = ""
  for (let i = 0; i < input.length; i++) {
    const ch = input[i]!
    if (ch === "\\" && i + 1 < input.length) {
      current += ch + input[i + 1]!
      i++
    } else if (ch === ",") {
      terms.push(current)
      current = ""
    } else {
      current += ch
    }
  }
  terms.push(current)
  return terms
}

const unescape = (text: string): string | undefined => {
  let out = ""
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!
    if (ch === "\\") {
      const nextCh = text[i + 1]
      if (nextCh !== "\\" && nextCh !== "," && nextCh !== "=") return undefined
      out += nextCh
      i++
    } else if (ch === "," || ch === "=") {
      return undefined
    } else {
      out += ch
    }
  }
  return out
}

/**
 * Parses a field selector. Only `metadata.name` and `metadata.namespace` are known, as for every
 * custom resource; another field is refused in the apiserver's words.
 */
export const parseFieldSelector = (input: string): Either.Either<FieldSelector, SelectorParseError> => {
  const requirements: Array<FieldRequirement> = []
  if (input.trim() === "") return Either.right({ requirements })
  for (const term of splitTerms(input)) {
    const match = /^(.*?)(==|!=|=)(.*)$/s.exec(term)
    if (match === null) {
      return Either.left({ message: `invalid selector: '${input}'; can't understand '${term}'` })
    }
    const field = match[1]!.trim()
    const value = unescape(match[3]!)
    if (value === undefined) return Either.left({ message: `invalid field selector value: '${match[3]}'` })
    if (field !== "metadata.name" && field !== "metadata.namespace") {
      return Either.left({
        message: `"${field}" is not a known field selector: only "metadata.name", "metadata.namespace"`
      })
    }
    requirements.push({ field, op: match[2] === "!=" ? "!=" : "=", value })
  }
  return Either.right({ requirements })
}

/** Whether an object's name and namespace satisfy every term. */
export const matchesFields = (selector: FieldSelector, name: string, namespace: string): boolean =>
  selector.requirements.every((req) => {
    const actual = req.field === "metadata.name" ? name : namespace
    return req.op === "=" ? actual === req.value : actual !== req.value
  })

/** Whether a selector is empty: the apiserver reports `remainingItemCount` only then. */
export const isEmptySelection = (labels: LabelSelector, fields: FieldSelector): boolean =>
  labels.requirements.length === 0 && fields.requirements.length === 0

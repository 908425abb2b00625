/**
 * Label and field selectors as the apiserver parses and applies them: the grammar of
 * `k8s.io/apimachinery/pkg/labels` (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`, `>`, `<`,
 * comma = AND) and of `fields` (`=`, `==`, `!=` on `metadata.name` / `metadata.namespace`, the
 * only fields a custom resource may be selected by). Used by the simulated apiserver.
 * @internal
 */
import { Either } from "effect"

/** One parsed requirement of a label selector. */
export type LabelRequirement =
  | { readonly op: "exists" | "notExists"; readonly key: string }
  | { readonly op: "in" | "notIn"; readonly key: string; readonly values: ReadonlyArray<string> }
  | { readonly op: "gt" | "lt"; readonly key: string; readonly value: number }

/** A parsed label selector: every requirement must hold (an empty one selects everything). */
export interface LabelSelector {
  readonly requirements: ReadonlyArray<LabelRequirement>
}

/** Why a selector string was refused, in words close to the apiserver's. */
export interface SelectorParseError {
  readonly message: string
}

type Token =
  | { readonly kind: "identifier"; readonly text: string }
  | { readonly kind: "in" | "notin" | "(" | ")" | "," | "!" | "=" | "==" | "!=" | ">" | "<" | "end" }

const special = new Set(["=", "!", "(", ")", ",", ">", "<"])
const isSpace = (ch: string) => ch === " " || ch === "\t" || ch === "\r" || ch === "\n"

const tokenize = (input: string): Array<Token> => {
  const tokens: Array<Token> = []
  let i = 0
  while (i < input.length) {
    const ch = input[i]!
    if (isSpace(ch)) {
      i++
      continue
    }
    if (special.has(ch)) {
      const two = input.slice(i, i + 2)
      if (two === "==" || two === "!=") {
        tokens.push({ kind: two })
        i += 2
      } else {
        tokens.push({ kind: ch as "=" })
        i++
      }
      continue
    }
    let j = i
    while (j < input.length && !isSpace(input[j]!) && !special.has(input[j]!)) j++
    const text = input.slice(i, j)
    tokens.push(text === "in" ? { kind: "in" } : text === "notin" ? { kind: "notin" } : { kind: "identifier", text })
    i = j
  }
  tokens.push({ kind: "end" })
  return tokens
}

const describe = (token: Token): string =>
  token.kind === "identifier" ? token.text : token.kind === "end" ? "end of string" : token.kind

const nameRegex = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/
const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/

/** A qualified name (`prefix/name` or `name`), as label keys must be. Returns the problem, if any. */
const validateKey = (key: string): string | undefined => {
  const slash = key.lastIndexOf("/")
  const [prefix, name] = slash === -1 ? [undefined, key] : [key.slice(0, slash), key.slice(slash + 1)]
  if (prefix !== undefined) {
    if (prefix.length === 0) return `Invalid value: "${key}": prefix part must be non-empty`
    if (prefix.length > 253 || !dns1123Subdomain.test(prefix)) {
      return `Invalid value: "${key}": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character`
    }
  }
  if (name.length === 0) return `Invalid value: "${key}": name part must be non-empty`
  if (name.length > 63) return `Invalid value: "${key}": name part must be no more than 63 characters`
  if (!nameRegex.test(name)) {
    return `Invalid value: "${key}": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`
  }
  return undefined
}

const validateValue = (value: string): string | undefined => {
  if (value.length > 63) return `Invalid value: "${value}": must be no more than 63 characters`
  if (value.length > 0 && !nameRegex.test(value)) {
    return `Invalid value: "${value}": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`
  }
  return undefined
}

class ParseFailure {
  constructor(readonly message: string) {}
}

/**
 * Parses a label selector. `""` selects everything; anything the apiserver would refuse is a
 * `Left` with its reason (the apiserver answers those with 400 BadRequest).
 */
export const parseLabelSelector = (input: string): Either.Either<LabelSelector, SelectorParseError> => {
  const tokens = tokenize(input)
  let pos = 0
  const peek = () => tokens[pos]!
  const next = () => tokens[pos++]!
  const fail = (message: string): never => {
    throw new ParseFailure(`unable to parse requirement: ${message}`)
  }
  const key = (text: string) => {
    const problem = validateKey(text)
    return problem === undefined ? text : fail(`<nil>: ${problem}`)
  }
  const value = (text: string) => {
    const problem = validateValue(text)
    return problem === undefined ? text : fail(`<nil>: ${problem}`)
  }
  const parseValues = (): Array<string> => {
    const open = next()
    if (open.kind !== "(") fail(`found '${describe(open)}', expected: '('`)
    const values: Array<string> = []
    for (;;) {
      const token = next()
      if (token.kind === "identifier") {
        values.push(value(token.text))
        const after = next()
        if (after.kind === ")") return values
        if (after.kind !== ",") fail(`found '${describe(after)}', expected: ',' or ')'`)
        continue
      }
      if (token.kind === ",") {
        values.push("")
        continue
      }
      if (token.kind === ")") {
        // `()` is the set of the empty value, and so is the tail of `(a,)`.
        values.push("")
        return values
      }
      return fail(`found '${describe(token)}', expected: ',', ')' or identifier`)
    }
  }
  const requirement = (): LabelRequirement => {
    const first = next()
    if (first.kind === "!") {
      const name = next()
      if (name.kind !== "identifier") return fail(`found '${describe(name)}', expected: identifier after '!'`)
      return { op: "notExists", key: key(name.text) }
    }
    if (first.kind !== "identifier") {
      return fail(`found '${describe(first)}', expected: !, identifier, or 'end of string'`)
    }
    const k = key(first.text)
    const op = peek()
    switch (op.kind) {
      case ",":
      case "end":
        return { op: "exists", key: k }
      case "=":
      case "==":
      case "!=": {
        next()
        const v = peek()
        // `key=` is a requirement on the empty value.
        const text = v.kind === "identifier"
          ? (next(), v.text)
          : v.kind === "," || v.kind === "end"
          ? ""
          : fail(`found '${describe(v)}', expected: identifier`)
        return { op: op.kind === "!=" ? "notIn" : "in", key: k, values: [value(text)] }
      }
      case "in":
      case "notin": {
        next()
        const values = parseValues()
        if (values.length === 0) {
          fail(`<nil>: Invalid value: "${k}": for 'in', 'notin' operators, values set can't be empty`)
        }
        return { op: op.kind === "in" ? "in" : "notIn", key: k, values }
      }
      case ">":
      case "<": {
        next()
        const v = next()
        if (v.kind !== "identifier" || !/^-?[0-9]+$/.test(v.text)) {
          return fail(`<nil>: Invalid value: "${describe(v)}": for 'Gt', 'Lt' operators, the value must be an integer`)
        }
        return { op: op.kind === ">" ? "gt" : "lt", key: k, value: Number(v.text) }
      }
      default:
        return fail(`found '${describe(op)}', expected: in, notin, =, ==, !=, gt, lt`)
    }
  }
  try {
    const requirements: Array<LabelRequirement> = []
    if (peek().kind === "end") return Either.right({ requirements })
    for (;;) {
      requirements.push(requirement())
      const sep = next()
      if (sep.kind === "end") return Either.right({ requirements })
      if (sep.kind !== ",") fail(`found '${describe(sep)}', expected: ',' or 'end of string'`)
    }
  } catch (error) {
    if (error instanceof ParseFailure) return Either.left({ message: error.message })
    throw error
  }
}

/** Whether labels satisfy every requirement. `!=` and `notin` hold for a label that is absent. */
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
        if (!has || !/^-?[0-9]+$/.test(value!)) return false
        return req.op === "gt" ? Number(value) > req.value : Number(value) < req.value
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

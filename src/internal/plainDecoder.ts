/**
 * A fast decode path for the shapes Kubernetes objects use, compiled from a Schema's AST, with the
 * Schema itself as the judge.
 *
 * `Schema.decodeUnknownEither` walks the AST through generic parsers that build `Either`s at every
 * node; for a 3 KB Sandbox that costs more than the `JSON.parse` before it. Here the supported part
 * of the AST (struct and record types, arrays, string / number / boolean / literal / unknown
 * leaves, unions of those, suspended recursion) is compiled once into plain functions that either return the decoded value or decline.
 * A decline is not an error: the input then goes through `Schema.decodeUnknownEither`, whose answer
 * (a value, or the error and its message) is returned as is. So the compiled path may be stricter
 * than the Schema, never looser, and when it accepts, its output is what the Schema would return
 * (default parse options: excess properties dropped, absent optional keys absent, new objects
 * and arrays, property-signature keys first in schema order, then index-signature keys in
 * `Object.keys` order).
 *
 * A schema with any other node (a refinement, a transformation, a declaration, ...) is not compiled
 * at all: `decoderFor` returns `Schema.decodeUnknownEither(schema)` itself.
 *
 * @internal
 */
import type { ParseResult } from "effect"
import { Either, Option, Schema, SchemaAST as AST } from "effect"

/** What a compiled function returns when it will not answer; the Schema answers instead. */
export const Declined: unique symbol = Symbol("sandbox-watch/plainDecoder/Declined")
export type Declined = typeof Declined

/** A compiled decoder: the decoded value, or `Declined`. */
export type Compiled = (u: unknown) => unknown

const hasOwn = Object.prototype.hasOwnProperty

/** Thrown while compiling when a node is outside the supported subset. */
class Unsupported {
  constructor(readonly tag: string) {}
}

/**
 * A compiled node, and whether it is exact: it declines only what the Schema rejects. A union may
 * go on to its next member only after an exact member declined; after an inexact one it must
 * decline too, because the Schema might have accepted that member and answered with its output.
 */
interface Node {
  readonly run: Compiled
  readonly exact: boolean
}

const isString: Compiled = (u) => (typeof u === "string" ? u : Declined)
const isNumber: Compiled = (u) => (typeof u === "number" ? u : Declined)
const isBoolean: Compiled = (u) => (typeof u === "boolean" ? u : Declined)
const isUndefined: Compiled = (u) => (u === undefined ? u : Declined)
const identity: Compiled = (u) => u

/**
 * `ParseResult.goMemo` honours two annotations on any node: parse options (which could ask for
 * excess properties to be kept, or for `exact`) and a decoding fallback. Either one makes the node
 * unsupported rather than imitated.
 */
const checkAnnotations = (ast: AST.AST): void => {
  if (Option.isSome(AST.getParseOptionsAnnotation(ast)) || Option.isSome(AST.getDecodingFallbackAnnotation(ast))) {
    throw new Unsupported(`${ast._tag} with parse options or a decoding fallback`)
  }
}

/**
 * Whether a union member is "keyed" for `ParseResult`'s search tree (a required property whose type
 * is a literal): such members are tried first, or not at all, whatever their place in the union,
 * so the plain in-order walk would not match. Mirrors `ParseResult.getLiterals` for the supported
 * nodes.
 */
const isKeyedMember = (ast: AST.AST): boolean => {
  switch (ast._tag) {
    case "TypeLiteral":
      return ast.propertySignatures.some((ps) => !ps.isOptional && AST.isLiteral(ps.type))
    case "TupleType":
      return ast.elements.some((e) => !e.isOptional && AST.isLiteral(e.type))
    case "Suspend":
      return isKeyedMember(ast.f())
    default:
      return false
  }
}

/**
 * A struct or record compiles to generated code (one `new Function` per TypeLiteral, at compile
 * time): named loads and stores on constant keys keep V8's inline caches monomorphic, where a loop
 * over the key names made every load and store megamorphic (measured: 6.2 against 2.6 µs for a
 * Sandbox). Keys enter the code only as `JSON.stringify`'d string literals; literals and nested
 * decoders as parameters.
 *
 * The Schema tells an own key from an absent one with `hasOwnProperty` (an absent optional key is
 * skipped, an absent required one read through the prototype chain, which is declined here). Asking
 * `hasOwnProperty` for every key cost a third of the decode, so the code asks only when the answer
 * is not already known: once the input's prototype is `Object.prototype` (or `null`), a value other
 * than `undefined` under a key `Object.prototype` does not have can only be the input's own. (A
 * Proxy whose traps contradict each other could still pass for what it is not; the Schema itself
 * reads such an object differently from one call to the next.)
 */
const compileTypeLiteral = (ast: AST.TypeLiteral, memo: Map<AST.AST, Node>): Node => {
  // An empty struct answers with the input itself (`isNotNullable`): not worth imitating.
  if (ast.propertySignatures.length === 0 && ast.indexSignatures.length === 0) {
    throw new Unsupported("empty TypeLiteral")
  }
  if (ast.indexSignatures.length > 1) throw new Unsupported("TypeLiteral with several index signatures")
  const names: Array<string> = []
  const deps: Array<unknown> = []
  const dep = (value: unknown): string => `d${deps.push(value) - 1}`
  const lines: Array<string> = [
    `if (typeof u !== "object" || u === null || Array.isArray(u)) return D;`,
    `const out = {};`,
    `let v;`
  ]
  for (const ps of ast.propertySignatures) {
    // A symbol key never comes from JSON; `__proto__` would be written through the setter.
    if (typeof ps.name !== "string" || ps.name === "__proto__") throw new Unsupported(`property ${String(ps.name)}`)
    const key = JSON.stringify(ps.name)
    lines.push(`v = u[${key}];`)
    if (names.length === 0) {
      // After the first load, whose map check lets V8 read the prototype off the map for free
      // (before it, `Object.getPrototypeOf` was a call: a sixth of the decode).
      lines.push(`const proto = Object.getPrototypeOf(u); if (proto !== OP && proto !== null) return D;`)
    }
    names.push(ps.name)
    lines.push(
      `if ((v !== undefined && !(${key} in OP)) || hasOwn.call(u, ${key})) { ${
        checkCode(ps.type, memo, dep)
      } out[${key}] = v; }` +
        (ps.isOptional ? "" : ` else return D;`)
    )
  }
  const signature = ast.indexSignatures[0]
  if (signature !== undefined) {
    if (signature.parameter._tag !== "StringKeyword") {
      throw new Unsupported(`index signature on ${signature.parameter._tag}`)
    }
    checkAnnotations(signature.parameter)
    // Keys the property signatures own are checked against the index type too, but not written again.
    const write = names.length === 0 ? `out[k] = v;` : `if (!${dep(new Set(names))}.has(k)) out[k] = v;`
    // `for..in` with an own check visits what `Object.keys` lists, in its order, without the array.
    // `__proto__`: the Schema would assign it through the setter; let it answer for itself.
    lines.push(
      `for (const k in u) {`,
      `  if (!hasOwn.call(u, k)) continue;`,
      `  if (k === "__proto__") return D;`,
      `  v = u[k]; ${checkCode(signature.type, memo, dep)} ${write}`,
      `}`
    )
  }
  lines.push(`return out;`)
  const params = ["D", "OP", "hasOwn", ...deps.map((_, i) => `d${i}`)]
  const make = new Function(...params, `"use strict"; return function decodeTypeLiteral(u) {\n${lines.join("\n")}\n};`)
  return { exact: false, run: make(Declined, Object.prototype, hasOwn, ...deps) as Compiled }
}

/**
 * Generated code that checks `v` against `ast` (replacing it by its decoded value where that is a
 * new object) and returns `D` from the enclosing function when it declines. Leaves are inlined;
 * any other node is compiled and called.
 */
const checkCode = (ast: AST.AST, memo: Map<AST.AST, Node>, dep: (value: unknown) => string): string => {
  // Compiled even when inlined: that checks support and annotations, and memoizes.
  const node = compileNode(ast, memo)
  switch (ast._tag) {
    case "StringKeyword":
      return `if (typeof v !== "string") return D;`
    case "NumberKeyword":
      return `if (typeof v !== "number") return D;`
    case "BooleanKeyword":
      return `if (typeof v !== "boolean") return D;`
    case "UndefinedKeyword":
      return `if (v !== undefined) return D;`
    case "UnknownKeyword":
    case "AnyKeyword":
      return ``
    case "Literal":
      return `if (v !== ${dep(ast.literal)}) return D;`
    case "Union":
      // `Schema.optional(X)`: see `compileUnion` for why undefined needs no more than this.
      if (ast.types.length === 2 && ast.types[1]!._tag === "UndefinedKeyword") {
        return `if (v !== undefined) { ${checkCode(ast.types[0]!, memo, dep)} }`
      }
  }
  return `v = ${dep(node.run)}(v); if (v === D) return D;`
}

const compileArray = (ast: AST.TupleType, memo: Map<AST.AST, Node>): Node => {
  const rest = ast.rest[0]
  if (ast.elements.length > 0 || rest === undefined || ast.rest.length > 1) {
    throw new Unsupported("TupleType other than an array")
  }
  const element = compileNode(rest.type, memo)
  const run = element.run
  return {
    exact: element.exact,
    run: (u) => {
      if (!Array.isArray(u)) return Declined
      const length = u.length
      const out = new Array<unknown>(length)
      for (let i = 0; i < length; i++) {
        const value = run(u[i])
        if (value === Declined) return Declined
        out[i] = value
      }
      return out
    }
  }
}

const compileUnion = (ast: AST.Union, memo: Map<AST.AST, Node>): Node => {
  if (ast.types.some(isKeyedMember)) throw new Unsupported("Union with literal-keyed members")
  const members = ast.types.map((member) => compileNode(member, memo))
  const runs = members.map((m) => m.run)
  const exacts = members.map((m) => m.exact)
  const count = members.length
  // The common case, `Schema.optional(X)`: X | undefined. For undefined the Schema answers
  // undefined either way: X rejects it and the second member takes it, or X takes it, and no
  // supported node decodes undefined to anything else. Any other input is X's alone to judge.
  if (count === 2 && ast.types[1]!._tag === "UndefinedKeyword") {
    const first = runs[0]!
    return { exact: exacts[0]!, run: (u) => (u === undefined ? u : first(u)) }
  }
  return {
    exact: exacts.every((e) => e),
    run: (u) => {
      for (let i = 0; i < count; i++) {
        const value = runs[i]!(u)
        if (value !== Declined) return value
        if (!exacts[i]) return Declined
      }
      return Declined
    }
  }
}

const compileSuspend = (ast: AST.Suspend, memo: Map<AST.AST, Node>): Node => {
  // Registered before its body is compiled, so a recursive schema refers back to this node.
  let target: Compiled = () => Declined
  const node: Node = { exact: false, run: (u) => target(u) }
  memo.set(ast, node)
  target = compileNode(ast.f(), memo).run
  return node
}

const compileNode = (ast: AST.AST, memo: Map<AST.AST, Node>): Node => {
  const known = memo.get(ast)
  if (known !== undefined) return known
  checkAnnotations(ast)
  let node: Node
  switch (ast._tag) {
    case "StringKeyword":
      node = { exact: true, run: isString }
      break
    case "NumberKeyword":
      node = { exact: true, run: isNumber }
      break
    case "BooleanKeyword":
      node = { exact: true, run: isBoolean }
      break
    case "UndefinedKeyword":
      node = { exact: true, run: isUndefined }
      break
    case "UnknownKeyword":
    case "AnyKeyword":
      node = { exact: true, run: identity }
      break
    case "Literal": {
      const literal = ast.literal
      node = { exact: true, run: (u) => (u === literal ? u : Declined) }
      break
    }
    case "TypeLiteral":
      node = compileTypeLiteral(ast, memo)
      break
    case "TupleType":
      node = compileArray(ast, memo)
      break
    case "Union":
      node = compileUnion(ast, memo)
      break
    case "Suspend":
      return compileSuspend(ast, memo)
    default:
      throw new Unsupported(ast._tag)
  }
  memo.set(ast, node)
  return node
}

/**
 * The compiled path alone, for tests: `undefined` when the AST has a node outside the supported
 * subset; otherwise a function answering the decoded value or `Declined`.
 *
 * @internal
 */
export const compile = (ast: AST.AST): Compiled | undefined => {
  try {
    return compileNode(ast, new Map()).run
  } catch (error) {
    // EvalError: code generation is switched off (`--disallow-code-generation-from-strings`).
    if (error instanceof Unsupported || error instanceof EvalError) return undefined
    throw error
  }
}

type Decoder = (u: unknown) => Either.Either<any, ParseResult.ParseError>

// Keyed by AST: the AST alone decides what decoding does, and watches restart with the same schema.
const cache = new WeakMap<AST.AST, Decoder>()

/**
 * A decoder equal to `Schema.decodeUnknownEither(schema)`, faster for the shapes Kubernetes objects
 * use: the compiled path answers when it can, the Schema whenever the compiled path declines.
 * Compiled once per schema AST and cached.
 */
export const decoderFor = <A, I>(
  schema: Schema.Schema<A, I>
): (u: unknown) => Either.Either<A, ParseResult.ParseError> => {
  const cached = cache.get(schema.ast)
  if (cached !== undefined) return cached
  const slow = Schema.decodeUnknownEither(schema)
  const fast = compile(schema.ast)
  const decoder: Decoder = fast === undefined ? slow : (u) => {
    const value = fast(u)
    return value === Declined ? slow(u) : Either.right(value)
  }
  cache.set(schema.ast, decoder)
  return decoder
}

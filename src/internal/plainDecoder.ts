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
 * `ownedDecoderFor` is the same for an input the caller gives away (fresh from `JSON.parse`, held by
 * nobody else): where an object or array has nothing the Schema would drop, it is the output itself,
 * so a Sandbox without excess keys is validated, not copied. A level that has excess keys is copied
 * as above, and once the whole input has been accepted the copy is written into its parent in place
 * of the input's own child (before then the input is untouched, so a decline leaves the Schema the
 * input as it came, and its error says what was sent). The output is what the Schema would return
 * but for key order (the input's) and identity.
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

/** What a compilation shares: its nodes by AST, and whether its inputs are owned. */
interface Context {
  readonly memo: Map<AST.AST, Node>
  /** The input is the caller's to give away: decode it in place where nothing is dropped. */
  readonly owned: boolean
  /** The copying compilation of the same schema (itself, when not owned): for what cannot be in place. */
  readonly copying: Context
  /**
   * Owned: decoded copies to write into the input once all of it is accepted, as flat triples
   * (object, key, value). One decode runs at a time (it is synchronous and calls nothing outside).
   */
  readonly writes: Array<unknown>
}

const makeContext = (owned: boolean): Context => {
  const copying: Context = {
    memo: new Map(),
    owned: false,
    writes: [],
    get copying() {
      return copying
    }
  }
  return owned ? { memo: new Map(), owned: true, copying, writes: [] } : copying
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
 * over the key names made every load and store megamorphic, and the decode of a Sandbox more than
 * twice as slow (the bench's tp row). Keys enter the code only as `JSON.stringify`'d string literals; literals and nested
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
const compileTypeLiteral = (ast: AST.TypeLiteral, context: Context): Node => {
  // An empty struct answers with the input itself (`isNotNullable`): not worth imitating.
  if (ast.propertySignatures.length === 0 && ast.indexSignatures.length === 0) {
    throw new Unsupported("empty TypeLiteral")
  }
  if (ast.indexSignatures.length > 1) throw new Unsupported("TypeLiteral with several index signatures")
  const signature = ast.indexSignatures[0]
  // Property signatures and an index signature together: the owned input is copied.
  if (context.owned && signature !== undefined && ast.propertySignatures.length > 0) {
    return compileNode(ast, context.copying)
  }
  const owned = context.owned
  const names: Array<string> = []
  const deps: Array<unknown> = []
  const dep = (value: unknown): string => `d${deps.push(value) - 1}`
  // Owned: this level copied, for an input that has more than the Schema keeps or another prototype.
  const copy = owned ? dep(compileNode(ast, context.copying).run) : ""
  const lines: Array<string> = [
    `if (typeof u !== "object" || u === null || Array.isArray(u)) return D;`,
    // A record's output is a plain object: so is an owned input, or it is copied.
    owned && ast.propertySignatures.length === 0 ? `if (Object.getPrototypeOf(u) !== OP) return ${copy}(u);` : ``,
    owned ? `let n = 0;` : `const out = {};`,
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
      lines.push(
        owned
          // The output is a plain object: an owned input with no prototype is copied.
          ? `const proto = Object.getPrototypeOf(u); if (proto !== OP) { if (proto !== null) return D; return ${copy}(u); }`
          : `const proto = Object.getPrototypeOf(u); if (proto !== OP && proto !== null) return D;`
      )
    }
    names.push(ps.name)
    lines.push(
      `if ((v !== undefined && !(${key} in OP)) || hasOwn.call(u, ${key})) { ${checkCode(ps.type, context, dep, key)} ${
        owned ? "n++;" : `out[${key}] = v;`
      } }` +
        (ps.isOptional ? "" : ` else return D;`)
    )
  }
  if (signature !== undefined) {
    if (signature.parameter._tag !== "StringKeyword") {
      throw new Unsupported(`index signature on ${signature.parameter._tag}`)
    }
    checkAnnotations(signature.parameter)
    // Keys the property signatures own are checked against the index type too, but not written again.
    const write = owned ? `` : names.length === 0 ? `out[k] = v;` : `if (!${dep(new Set(names))}.has(k)) out[k] = v;`
    // `for..in` with an own check visits what `Object.keys` lists, in its order, without the array.
    // `__proto__`: the Schema would assign it through the setter; let it answer for itself.
    lines.push(
      `for (const k in u) {`,
      `  if (!hasOwn.call(u, k)) continue;`,
      `  if (k === "__proto__") return D;`,
      `  v = u[k]; ${checkCode(signature.type, context, dep, "k")} ${write}`,
      `}`
    )
    lines.push(owned ? `return u;` : `return out;`)
  } else if (owned) {
    // Every enumerable key the input has (its prototype is Object.prototype or null, checked above):
    // more than the schema's present ones, and the Schema would drop some: copy this level.
    lines.push(
      `let keys = 0;`,
      `for (const k in u) keys++;`,
      `return keys === n ? u : ${copy}(u);`
    )
  } else {
    lines.push(`return out;`)
  }
  const params = ["D", "OP", "hasOwn", ...deps.map((_, i) => `d${i}`)]
  const make = new Function(...params, `"use strict"; return function decodeTypeLiteral(u) {\n${lines.join("\n")}\n};`)
  return { exact: false, run: make(Declined, Object.prototype, hasOwn, ...deps) as Compiled }
}

/**
 * Generated code that checks `v` against `ast` (replacing it by its decoded value where that is a
 * new object) and returns `D` from the enclosing function when it declines. Leaves are inlined;
 * any other node is compiled and called.
 */
const checkCode = (
  ast: AST.AST,
  context: Context,
  dep: (value: unknown) => string,
  /** The key `v` was read under (code): an owned input gets a decoded copy written back there. */
  slot: string
): string => {
  // Compiled even when inlined: that checks support and annotations, and memoizes.
  const node = compileNode(ast, context)
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
        return `if (v !== undefined) { ${checkCode(ast.types[0]!, context, dep, slot)} }`
      }
  }
  const call = `v = ${dep(node.run)}(v); if (v === D) return D;`
  return context.owned
    ? `{ const input = v; ${call} if (v !== input) ${dep(context.writes)}.push(u, ${slot}, v); }`
    : call
}

const compileArray = (ast: AST.TupleType, context: Context): Node => {
  const rest = ast.rest[0]
  if (ast.elements.length > 0 || rest === undefined || ast.rest.length > 1) {
    throw new Unsupported("TupleType other than an array")
  }
  const element = compileNode(rest.type, context)
  const run = element.run
  if (context.owned) {
    const writes = context.writes
    const copy = compileNode(ast, context.copying).run
    return {
      exact: element.exact,
      run: (u) => {
        if (!Array.isArray(u)) return Declined
        // The output is a plain array: so is an owned input, or it is copied.
        if (Object.getPrototypeOf(u) !== Array.prototype) return copy(u)
        const length = u.length
        for (let i = 0; i < length; i++) {
          const input = u[i]
          const value = run(input)
          if (value === Declined) return Declined
          if (value !== input) writes.push(u, i, value)
        }
        return u
      }
    }
  }
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

const compileUnion = (ast: AST.Union, context: Context): Node => {
  if (ast.types.some(isKeyedMember)) throw new Unsupported("Union with literal-keyed members")
  const optional = ast.types.length === 2 && ast.types[1]!._tag === "UndefinedKeyword"
  // The members of a real union copy (an optional value's need not): what a declined member had
  // recorded to write into an owned input must never land with another member's answer. (Today only
  // an exact member, which records nothing, lets the next one try; this keeps it so.)
  const members = ast.types.map((member) => compileNode(member, optional ? context : context.copying))
  const runs = members.map((m) => m.run)
  const exacts = members.map((m) => m.exact)
  const count = members.length
  // The common case, `Schema.optional(X)`: X | undefined. For undefined the Schema answers
  // undefined either way: X rejects it and the second member takes it, or X takes it, and no
  // supported node decodes undefined to anything else. Any other input is X's alone to judge.
  if (optional) {
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

const compileSuspend = (ast: AST.Suspend, context: Context): Node => {
  // Registered before its body is compiled, so a recursive schema refers back to this node.
  let target: Compiled = () => Declined
  const node: Node = { exact: false, run: (u) => target(u) }
  context.memo.set(ast, node)
  target = compileNode(ast.f(), context).run
  return node
}

const compileNode = (ast: AST.AST, context: Context): Node => {
  const known = context.memo.get(ast)
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
      node = compileTypeLiteral(ast, context)
      break
    case "TupleType":
      node = compileArray(ast, context)
      break
    case "Union":
      node = compileUnion(ast, context)
      break
    case "Suspend":
      return compileSuspend(ast, context)
    default:
      throw new Unsupported(ast._tag)
  }
  context.memo.set(ast, node)
  return node
}

/**
 * The compiled path alone, for tests: `undefined` when the AST has a node outside the supported
 * subset; otherwise a function answering the decoded value or `Declined`. `owned`: decoding in
 * place, as `ownedDecoderFor` does.
 *
 * @internal
 */
export const compile = (ast: AST.AST, owned = false): Compiled | undefined => {
  try {
    const context = makeContext(owned)
    const run = compileNode(ast, context).run
    if (!owned) return run
    const writes = context.writes
    return (u) => {
      writes.length = 0
      const value = run(u)
      // Accepted: the decoded copies go into the input (declined, it stays as it came).
      if (value !== Declined) {
        for (let i = 0; i < writes.length; i += 3) {
          ;(writes[i] as Record<PropertyKey, unknown>)[writes[i + 1] as PropertyKey] = writes[i + 2]
        }
      }
      writes.length = 0
      return value
    }
  } catch (error) {
    // EvalError: code generation is switched off (`--disallow-code-generation-from-strings`).
    if (error instanceof Unsupported || error instanceof EvalError) return undefined
    throw error
  }
}

type Decoder = (u: unknown) => Either.Either<any, ParseResult.ParseError>

// Keyed by AST: the AST alone decides what decoding does, and watches restart with the same schema.
const copying = new WeakMap<AST.AST, Decoder>()
const inPlace = new WeakMap<AST.AST, Decoder>()

const cachedDecoder = <A, I>(
  schema: Schema.Schema<A, I>,
  owned: boolean
): (u: unknown) => Either.Either<A, ParseResult.ParseError> => {
  const cache = owned ? inPlace : copying
  const cached = cache.get(schema.ast)
  if (cached !== undefined) return cached
  const slow = Schema.decodeUnknownEither(schema)
  const fast = compile(schema.ast, owned)
  const decoder: Decoder = fast === undefined ? slow : (u) => {
    const value = fast(u)
    return value === Declined ? slow(u) : Either.right(value)
  }
  cache.set(schema.ast, decoder)
  return decoder
}

/**
 * A decoder equal to `Schema.decodeUnknownEither(schema)`, faster for the shapes Kubernetes objects
 * use: the compiled path answers when it can, the Schema whenever the compiled path declines.
 * Compiled once per schema AST and cached.
 */
export const decoderFor = <A, I>(
  schema: Schema.Schema<A, I>
): (u: unknown) => Either.Either<A, ParseResult.ParseError> => cachedDecoder(schema, false)

/**
 * The same for an input the caller gives away, as it comes from `JSON.parse`: its objects and
 * arrays become the output wherever the Schema would keep all they hold (a decoded copy of a part
 * that has more is written into it in place of that part). The input must not be used afterwards,
 * except as what was decoded; the Schema answers for it whenever the compiled path declines.
 */
export const ownedDecoderFor = <A, I>(
  schema: Schema.Schema<A, I>
): (u: unknown) => Either.Either<A, ParseResult.ParseError> => cachedDecoder(schema, true)

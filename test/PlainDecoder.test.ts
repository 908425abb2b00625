/**
 * The compiled decode path against the Schema it is compiled from: on valid values it must answer
 * (not decline) with exactly the Schema's output; on damaged ones `decoderFor` must answer exactly
 * what `Schema.decodeUnknownEither` does, message and all. The same for the in-place decoder
 * (`ownedDecoderFor`), given a copy of the input: the Schema's value (keys in the input's order), the
 * very input where the Schema would keep all of it, and the Schema's error otherwise.
 */
import { describe, expect, it } from "@effect/vitest"
import { Arbitrary, Either, FastCheck, ParseResult, Schema } from "effect"
import { isDeepStrictEqual } from "node:util"
import { compile, Declined, decoderFor, ownedDecoderFor } from "../src/internal/plainDecoder.ts"
import { Sandbox } from "../src/Sandbox.ts"
import { evolve, makeSandbox, nameOf } from "./bench/data.ts"

// -------------------------------------------------------------------------------------------------
// Schemas
// -------------------------------------------------------------------------------------------------

const Small = Schema.Struct({
  s: Schema.String,
  n: Schema.optional(Schema.Number),
  b: Schema.Boolean,
  lit: Schema.Literal("a", 1, null, true),
  tags: Schema.optional(Schema.Array(Schema.String)),
  rec: Schema.Record({ key: Schema.String, value: Schema.Number }),
  nested: Schema.optional(Schema.Struct({ x: Schema.String, y: Schema.optional(Schema.Boolean) })),
  either: Schema.Union(Schema.String, Schema.Number, Schema.Literal(null)),
  exactOptional: Schema.optionalWith(Schema.String, { exact: true }),
  any: Schema.optional(Schema.Unknown)
})

/** Keys `Object.prototype` also has: an absent one reads as an inherited function. */
const ProtoNames = Schema.Struct({
  constructor: Schema.optional(Schema.String),
  toString: Schema.optional(Schema.String),
  valueOf: Schema.String,
  "0": Schema.optional(Schema.Number)
})

/**
 * Property signatures and an index signature in one struct. (`exact`: with `optional`, the
 * Arbitrary makes `count: undefined`, which the index signature's string rejects.)
 */
const Mixed = Schema.Struct(
  { kind: Schema.String, count: Schema.optionalWith(Schema.String, { exact: true }) },
  Schema.Record({ key: Schema.String, value: Schema.String })
)

/**
 * The index signature's type is not the property signatures': a named key must keep the value its
 * property signature decoded (a new object), not the index signature's (the input's own object).
 */
const MixedUnknown = Schema.Struct(
  { inner: Schema.optional(Schema.Struct({ a: Schema.String })), kind: Schema.String },
  Schema.Record({ key: Schema.String, value: Schema.Unknown })
)

/**
 * Unions whose members may decline what the Schema's would take: the compiled path must not guess.
 * `{ a: string | undefined }` takes an object without `a` in the Schema (a missing key reads as
 * undefined), where the compiled member declines: going on to `{ b }` would answer wrongly.
 */
const Unions = Schema.Struct({
  objects: Schema.Union(Schema.Struct({ a: Schema.String }), Schema.Struct({ b: Schema.Number })),
  missingTaken: Schema.optional(
    Schema.Union(
      Schema.Struct({ a: Schema.UndefinedOr(Schema.String) }),
      Schema.Struct({ b: Schema.optional(Schema.Number) })
    )
  ),
  arrays: Schema.Union(Schema.Array(Schema.String), Schema.Array(Schema.Number)),
  optionalObject: Schema.optional(Schema.Union(Schema.Struct({ a: Schema.String }), Schema.Undefined))
})

interface Tree {
  readonly name: string
  readonly children: ReadonlyArray<Tree>
}
const Tree: Schema.Schema<Tree> = Schema.Struct({
  name: Schema.String,
  children: Schema.Array(Schema.suspend((): Schema.Schema<Tree> => Tree))
})

// -------------------------------------------------------------------------------------------------
// Helpers
// -------------------------------------------------------------------------------------------------

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

/** Every key in enumeration order, with its path: `toStrictEqual` does not look at key order. */
const keyOrder = (u: unknown, path = "$"): Array<string> => {
  if (!isObject(u)) return []
  return Object.keys(u).flatMap((key) => [`${path}.${key}`, ...keyOrder(u[key], `${path}.${key}`)])
}

/**
 * Where `output` holds an object or array of `input`'s own. The Schema builds every struct and
 * array anew; only `Unknown` hands an input object through, and the compiled path must do the same.
 */
const sharedPaths = (output: unknown, input: unknown): Array<string> => {
  const seen = new Set<unknown>()
  const collect = (u: unknown): void => {
    if (!isObject(u) || seen.has(u)) return
    seen.add(u)
    for (const key of Object.keys(u)) collect(u[key])
  }
  collect(input)
  const walk = (u: unknown, path: string): Array<string> =>
    !isObject(u) ? [] : seen.has(u) ? [path] : Object.keys(u).flatMap((key) => walk(u[key], `${path}.${key}`))
  return walk(output, "$")
}

/** Whether an object anywhere in `u` has an own `__proto__` key. */
const hasProtoKey = (u: unknown): boolean =>
  isObject(u) &&
  (Object.prototype.hasOwnProperty.call(u, "__proto__") || Object.keys(u).some((key) => hasProtoKey(u[key])))

/** Whether every object in `a` has the prototype of its twin in `b` (where `b` has one). */
const samePrototypes = (a: unknown, b: unknown): boolean =>
  !isObject(a) || !isObject(b) ||
  (Object.getPrototypeOf(a) === Object.getPrototypeOf(b) &&
    Object.keys(a).every((key) => samePrototypes(a[key], b[key])))

/**
 * `a` is `b` as it is: deep-equal and every prototype the same. Node 24 and 26's `isDeepStrictEqual`
 * compares the `constructor` two plain objects inherit, not their prototypes, so there an object whose
 * keys are all inherited (`Object.create(o)`) equals `{}`; Node 20's compared the prototypes.
 */
const keptAsIs = (a: unknown, b: unknown): boolean => isDeepStrictEqual(a, b) && samePrototypes(a, b)

/** A copy that keeps what JSON would lose (undefined, NaN, -0), so the input stays the generator's. */
const clone = (u: unknown): unknown => {
  if (Array.isArray(u)) return u.map(clone)
  if (isObject(u)) {
    const out: Record<string, unknown> = {}
    for (const key of Object.keys(u)) {
      Object.defineProperty(out, key, { value: clone(u[key]), enumerable: true, writable: true, configurable: true })
    }
    return out
  }
  return u
}

/** A copy that keeps every object's prototype too (an inherited key stays inherited), for the in-place decoder to own. */
const cloneWithPrototypes = (u: unknown): unknown => {
  if (Array.isArray(u)) return u.map(cloneWithPrototypes)
  if (isObject(u)) {
    const out = Object.create(Object.getPrototypeOf(u)) as Record<string, unknown>
    for (const key of Object.keys(u)) {
      const value = cloneWithPrototypes(u[key])
      Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true })
    }
    return out
  }
  return u
}

const formatted = (result: Either.Either<unknown, ParseResult.ParseError>) =>
  result._tag === "Right" ? result : { _tag: "Left", message: ParseResult.TreeFormatter.formatErrorSync(result.left) }

/** `decoderFor` answers what the Schema answers: the same value, or the same error message. */
const expectSameAnswer = <A, I>(schema: Schema.Schema<A, I>, u: unknown) => {
  const expected = Schema.decodeUnknownEither(schema)(u)
  const actual = decoderFor(schema)(u)
  expect(formatted(actual)).toStrictEqual(formatted(expected))
  if (actual._tag === "Right" && expected._tag === "Right") {
    expect(keyOrder(actual.right)).toStrictEqual(keyOrder(expected.right))
  }
  return expected
}

/**
 * `ownedDecoderFor`, given a copy of `u` to own, answers what the Schema answers on `u`: the same
 * value or the same error message. Where the Schema's value is `u` as it is (nothing dropped) and
 * `inPlace`, the answer is the very copy it was given.
 */
const expectSameOwnedAnswer = <A, I>(schema: Schema.Schema<A, I>, u: unknown, inPlace: boolean) => {
  const given = cloneWithPrototypes(u)
  // Asked of the very copy, first (the Schema leaves its input as it is): what the Schema keeps as
  // it is (an `Unknown`) is then the same object in both answers.
  const expected = Schema.decodeUnknownEither(schema)(given)
  const actual = ownedDecoderFor(schema)(given)
  expect(formatted(actual)).toStrictEqual(formatted(expected))
  if (inPlace && actual._tag === "Right" && keptAsIs(actual.right, u)) expect(actual.right).toBe(given)
  return actual
}

/**
 * The compiled path alone on `u`: when it answers, the Schema accepts `u` and its output is the
 * same value, keys in the same order, new objects where the Schema's are new. Returns whether it
 * answered.
 */
const expectCompiledSound = <A, I>(schema: Schema.Schema<A, I>, u: unknown): boolean => {
  const run = compile(schema.ast)
  expect(run).toBeDefined()
  const value = run!(u)
  if (value === Declined) return false
  const expected = Schema.decodeUnknownEither(schema)(u)
  expect(expected._tag).toBe("Right")
  if (expected._tag === "Right") {
    expect(value).toStrictEqual(expected.right)
    expect(keyOrder(value)).toStrictEqual(keyOrder(expected.right))
    expect(sharedPaths(value, u)).toStrictEqual(sharedPaths(expected.right, u))
  }
  return true
}

// -------------------------------------------------------------------------------------------------
// Damage
// -------------------------------------------------------------------------------------------------

const DamageKinds = [
  "extraKey",
  "replace",
  "arrayForObject",
  "null",
  "dropKey",
  "undefinedValue",
  "protoKey",
  "inheritedKey"
] as const
interface Damage {
  readonly at: number
  readonly kind: (typeof DamageKinds)[number]
  readonly key: string
  readonly json: unknown
}

const damageArbitrary: FastCheck.Arbitrary<Damage> = FastCheck.record({
  at: FastCheck.nat(),
  kind: FastCheck.constantFrom(...DamageKinds),
  // Names the schemas use too, so a damage often lands where it matters.
  key: FastCheck.oneof(
    FastCheck.string(),
    FastCheck.constantFrom(
      "__proto__",
      "constructor",
      "toString",
      "name",
      "resourceVersion",
      "metadata",
      "status",
      "s",
      "kind",
      "a",
      "b"
    )
  ),
  json: FastCheck.jsonValue()
})

interface Slot {
  readonly parent: Record<string, unknown>
  readonly key: string
}

/** Every place a value sits (the root included), parents before children. */
const slotsOf = (holder: Record<string, unknown>): Array<Slot> => {
  const out: Array<Slot> = []
  const walk = (parent: Record<string, unknown>) => {
    for (const key of Object.keys(parent)) {
      out.push({ parent, key })
      const value = parent[key]
      if (isObject(value)) walk(value)
    }
  }
  walk(holder)
  return out
}

const applyDamage = (value: unknown, damages: ReadonlyArray<Damage>): unknown => {
  const holder: Record<string, unknown> = { root: clone(value) }
  for (const damage of damages) {
    const slots = slotsOf(holder)
    const slot = slots[damage.at % slots.length]!
    const target = slot.parent[slot.key]
    const objectTarget = isObject(target) && !Array.isArray(target) ? target : undefined
    switch (damage.kind) {
      case "extraKey":
        if (objectTarget !== undefined) objectTarget[damage.key] = clone(damage.json)
        else slot.parent[slot.key] = clone(damage.json)
        break
      case "replace":
        slot.parent[slot.key] = clone(damage.json)
        break
      case "arrayForObject":
        slot.parent[slot.key] = objectTarget !== undefined ? [objectTarget] : [target]
        break
      case "null":
        slot.parent[slot.key] = null
        break
      case "dropKey": {
        const keys = objectTarget !== undefined ? Object.keys(objectTarget) : []
        if (keys.length > 0) delete objectTarget![keys[damage.at % keys.length]!]
        else if (slot.parent !== holder) delete slot.parent[slot.key]
        break
      }
      case "undefinedValue":
        slot.parent[slot.key] = undefined
        break
      case "protoKey":
        // An own `__proto__`, as JSON.parse makes one.
        if (objectTarget !== undefined) {
          Object.defineProperty(objectTarget, "__proto__", {
            value: clone(damage.json),
            enumerable: true,
            writable: true,
            configurable: true
          })
        }
        break
      case "inheritedKey":
        // The same keys, but inherited: the Schema reads an absent required key through the chain.
        if (objectTarget !== undefined) slot.parent[slot.key] = Object.create(objectTarget)
        break
    }
  }
  return holder.root
}

/**
 * The two properties over a schema: valid values are answered by the compiled path (when
 * `acceptsValid`) with the Schema's output; damaged ones get the Schema's answer from `decoderFor`.
 * The damaged runs must have seen both outcomes, or they tested nothing.
 */
const checkSchema = <A, I>(
  schema: Schema.Schema<A, I>,
  options: {
    readonly acceptsValid: boolean
    readonly numRuns: number
    /** Valid values that keep all they hold come back as the owned input itself. */
    readonly inPlace?: boolean
  }
) => {
  const valid = Arbitrary.make(schema)
  const inPlace = options.inPlace ?? false
  const owned = compile(schema.ast, true)
  let sameObject = 0
  FastCheck.assert(
    FastCheck.property(valid, (value) => {
      const answered = expectCompiledSound(schema, value)
      // Fast-check likes `__proto__` for record keys: there a decline is by design (the Schema answers).
      if (options.acceptsValid && !hasProtoKey(value)) expect(answered).toBe(true)
      expect(expectSameAnswer(schema, value)._tag).toBe("Right")
      // In place: the compiled path answers valid values too, with the Schema's value.
      const given = cloneWithPrototypes(value)
      const inPlaceAnswer = owned!(given)
      if (options.acceptsValid && !hasProtoKey(value)) expect(inPlaceAnswer).not.toBe(Declined)
      const ownedAnswer = expectSameOwnedAnswer(schema, value, inPlace)
      if (
        ownedAnswer._tag === "Right" && ownedAnswer.right !== undefined && keptAsIs(ownedAnswer.right, value)
      ) {
        sameObject++
      }
    }),
    { numRuns: options.numRuns }
  )
  if (inPlace) expect(sameObject).toBeGreaterThan(0)
  const seen = { compiled: 0, declinedRight: 0, declinedLeft: 0 }
  FastCheck.assert(
    FastCheck.property(valid, FastCheck.array(damageArbitrary, { minLength: 1, maxLength: 3 }), (value, damages) => {
      const u = applyDamage(value, damages)
      const expected = expectSameAnswer(schema, u)
      expectSameOwnedAnswer(schema, u, inPlace)
      if (expectCompiledSound(schema, u)) seen.compiled++
      else if (expected._tag === "Right") seen.declinedRight++
      else seen.declinedLeft++
    }),
    { numRuns: options.numRuns }
  )
  expect(seen.declinedLeft).toBeGreaterThan(0)
  if (options.acceptsValid) expect(seen.compiled).toBeGreaterThan(0)
}

// -------------------------------------------------------------------------------------------------
// Tests
// -------------------------------------------------------------------------------------------------

describe("plainDecoder", () => {
  describe("against Schema, property-based", () => {
    it("Sandbox", () => checkSchema(Sandbox, { acceptsValid: true, numRuns: 300, inPlace: true }))
    it("a struct of every supported leaf, arrays, a record, nested and optional structs", () =>
      checkSchema(Small, { acceptsValid: true, numRuns: 1000, inPlace: true }))
    it("keys Object.prototype also has", () =>
      checkSchema(ProtoNames, { acceptsValid: true, numRuns: 500, inPlace: true }))
    it("property signatures and an index signature together", () =>
      checkSchema(Mixed, { acceptsValid: true, numRuns: 500 }))
    it("an index signature of another type than the property signatures", () =>
      checkSchema(MixedUnknown, { acceptsValid: true, numRuns: 500 }))
    it("a recursive schema (suspend)", () => checkSchema(Tree, { acceptsValid: true, numRuns: 300, inPlace: true }))
    it("unions whose members may decline: the Schema answers", () =>
      checkSchema(Unions, { acceptsValid: false, numRuns: 500 }))
  })

  it("the bench's Sandboxes (JSON round-tripped, with managedFields) are answered by the compiled path", () => {
    const run = compile(Sandbox.ast)!
    for (let i = 0; i < 300; i++) {
      const base = makeSandbox(i, 0, i + 1, "bench")
      const object = i % 2 === 0 ? base : evolve(base, i, 1 + (i % 7), 1000 + i)
      const u = JSON.parse(JSON.stringify(object)) as { metadata: { managedFields: unknown } }
      expect(Array.isArray(u.metadata.managedFields)).toBe(true)
      expect(expectCompiledSound(Sandbox, u)).toBe(true)
      const decoded = run(u) as Sandbox
      expect("managedFields" in decoded.metadata).toBe(false)
      expect(decoded.metadata.name).toBe(nameOf(i))
      expect(expectSameAnswer(Sandbox, u)._tag).toBe("Right")
    }
  })

  it("in place: a Sandbox as JSON.parse gives it is validated, not copied; a part with excess keys is copied into it", () => {
    const decode = ownedDecoderFor(Sandbox)
    const text = JSON.stringify(makeSandbox(3, 0, 4, "bench"))
    const plain = JSON.parse(text) as { metadata: Record<string, unknown> }
    delete plain.metadata.managedFields
    const whole = decode(plain)
    expect(Either.isRight(whole) && whole.right).toBe(plain)

    const extra = JSON.parse(text) as { metadata: Record<string, unknown>; spec: unknown; status: unknown }
    const { metadata, spec, status } = extra
    const answer = decode(extra)
    if (Either.isLeft(answer)) expect.fail("a Sandbox with managedFields decodes")
    const decoded = answer.right as unknown as typeof extra
    expect(decoded).toBe(extra)
    expect(decoded.metadata).not.toBe(metadata)
    expect("managedFields" in decoded.metadata).toBe(false)
    expect(decoded.metadata).toStrictEqual(Schema.decodeUnknownSync(Sandbox)(JSON.parse(text)).metadata)
    expect(decoded.spec).toBe(spec)
    expect(decoded.status).toBe(status)
  })

  it("in place: an input that does not fit is left as it came, and the Schema's error says what was sent", () => {
    const u = JSON.parse(JSON.stringify(makeSandbox(3, 0, 4, "bench"))) as {
      metadata: Record<string, unknown>
      status: Record<string, unknown>
    }
    const metadata = u.metadata
    u.status.phase = 7
    const before = JSON.stringify(u)
    const answer = ownedDecoderFor(Sandbox)(u)
    expect(Either.isLeft(answer)).toBe(true)
    expect(u.metadata).toBe(metadata)
    expect(JSON.stringify(u)).toBe(before)
    expect(formatted(answer)).toStrictEqual(formatted(Schema.decodeUnknownEither(Sandbox)(JSON.parse(before))))
  })

  it("drops excess keys and writes the schema's keys in the schema's order", () => {
    const u = {
      extra: 1,
      b: false,
      rec: { z: 1, a: 2, "10": 3, "2": 4 },
      either: 7,
      lit: null,
      s: "x",
      exactOptional: "e"
    }
    const value = compile(Small.ast)!(u)
    expect(value).toStrictEqual({
      s: "x",
      b: false,
      lit: null,
      rec: { "2": 4, "10": 3, z: 1, a: 2 },
      either: 7,
      exactOptional: "e"
    })
    expect(Object.keys(value as object)).toStrictEqual(["s", "b", "lit", "rec", "either", "exactOptional"])
    expect(Object.keys((value as { rec: object }).rec)).toStrictEqual(["2", "10", "z", "a"])
    expectSameAnswer(Small, u)
  })

  it("an optional key present with undefined is kept; absent stays absent", () => {
    const base = { s: "x", b: true, lit: "a", rec: {}, either: "e" }
    expect(compile(Small.ast)!({ ...base, n: undefined })).toStrictEqual({ ...base, n: undefined })
    expect(compile(Small.ast)!(base)).toStrictEqual(base)
    expectSameAnswer(Small, { ...base, n: undefined })
  })

  it("declines what is not plainly its own, and the Schema answers", () => {
    const run = compile(ProtoNames.ast)!
    // Inherited: the Schema reads the required key through the prototype; the compiled path declines.
    const inherited = Object.create({ valueOf: "inherited" }) as object
    expect(run(inherited)).toBe(Declined)
    expect(expectSameAnswer(ProtoNames, inherited)).toStrictEqual(
      Schema.decodeUnknownEither(ProtoNames)({ valueOf: "inherited" })
    )
    // A class instance: another prototype, declined.
    class Meta {
      valueOf = "v"
    }
    expect(run(new Meta())).toBe(Declined)
    expectSameAnswer(ProtoNames, new Meta())
    // No prototype at all: nothing can be inherited, so it is answered.
    const bare = Object.assign(Object.create(null) as object, { valueOf: "v", constructor: "c" })
    expect(run(bare)).toStrictEqual({ constructor: "c", valueOf: "v" })
    expectSameAnswer(ProtoNames, bare)
    // A non-enumerable own key is still own, for the Schema as here.
    const hidden = Object.defineProperty({ valueOf: "v" }, "toString", { value: "t", enumerable: false })
    expect(run(hidden)).toStrictEqual({ toString: "t", valueOf: "v" })
    expectSameAnswer(ProtoNames, hidden)
  })

  it("in place, an object whose keys are all inherited is answered anew: the Schema's value inherits nothing", () => {
    // An optional key is read only when it is the object's own: the Schema answers `spec: {}`.
    const u = { metadata: { name: "a", resourceVersion: "1" }, spec: Object.create({ repos: [{ url: "u" }] }) }
    const answer = expectSameOwnedAnswer(Sandbox, u, true)
    expect(answer._tag === "Right" && Object.getPrototypeOf(answer.right.spec)).toBe(Object.prototype)
  })

  it("a union member that declines ends the union: the Schema may have taken it", () => {
    const u = { objects: { a: "x" }, arrays: [], missingTaken: { b: 1 } }
    expect(compile(Unions.ast)!(u)).toBe(Declined)
    const answer = expectSameAnswer(Unions, u)
    expect(answer._tag === "Right" && answer.right.missingTaken).toStrictEqual({ a: undefined })
  })

  it("a __proto__ key in a record is the Schema's to answer", () => {
    const u = JSON.parse(`{"metadata":{"name":"a","resourceVersion":"1","labels":{"__proto__":"x","run":"r"}}}`)
    expect(compile(Sandbox.ast)!(u)).toBe(Declined)
    const answer = expectSameAnswer(Sandbox, u)
    expect(answer._tag === "Right" && answer.right.metadata.labels).toStrictEqual({ run: "r" })
  })

  it("wrong shapes fall back to the Schema's error, message and all", () => {
    const cases: Array<unknown> = [
      null,
      [],
      "sandbox",
      { metadata: [] },
      { metadata: { name: "a" } },
      { metadata: { name: 5, resourceVersion: "1" } },
      { metadata: { name: "a", resourceVersion: "1", labels: { run: 5 } } },
      { metadata: { name: "a", resourceVersion: "1" }, status: { conditions: {} } },
      { metadata: { name: "a", resourceVersion: "1" }, status: { conditions: [{ type: "Ready" }] } }
    ]
    for (const u of cases) {
      expect(compile(Sandbox.ast)!(u)).toBe(Declined)
      const answer = decoderFor(Sandbox)(u)
      expect(answer._tag).toBe("Left")
      expectSameAnswer(Sandbox, u)
    }
    const answer = decoderFor(Sandbox)({ metadata: { name: 5, resourceVersion: "1" } })
    expect(Either.isLeft(answer) && ParseResult.TreeFormatter.formatErrorSync(answer.left)).toContain(
      "Expected string, actual 5"
    )
  })

  describe("schemas with an unsupported node are not compiled, and decode as the Schema does", () => {
    const unsupported = {
      transformation: Schema.Struct({ n: Schema.NumberFromString, s: Schema.String }),
      refinement: Schema.Struct({ s: Schema.NonEmptyString }),
      keyedUnion: Schema.Union(
        Schema.Struct({ kind: Schema.Literal("a"), a: Schema.String }),
        Schema.Struct({ kind: Schema.Literal("b"), b: Schema.Number })
      ),
      parseOptions: Schema.Struct({ s: Schema.String }).annotations({ parseOptions: { onExcessProperty: "preserve" } }),
      emptyStruct: Schema.Struct({ inner: Schema.Struct({}) })
    }
    for (const [name, schema] of Object.entries(unsupported)) {
      it(name, () => {
        expect(compile(schema.ast)).toBeUndefined()
        const valid = Arbitrary.make(schema as Schema.Schema<unknown, unknown>)
        FastCheck.assert(
          FastCheck.property(valid, FastCheck.array(damageArbitrary, { maxLength: 2 }), (value, damages) => {
            expectSameAnswer(schema as Schema.Schema<unknown, unknown>, applyDamage(value, damages))
          }),
          { numRuns: 200 }
        )
      })
    }
    it("NumberFromString inside a struct: the Schema's transformation is applied", () => {
      const schema = unsupported.transformation
      expect(decoderFor(schema)({ n: "12", s: "x", extra: 1 })).toStrictEqual(
        Schema.decodeUnknownEither(schema)({ n: "12", s: "x" })
      )
      expect(formatted(decoderFor(schema)({ n: "twelve", s: "x" }))).toStrictEqual(
        formatted(Schema.decodeUnknownEither(schema)({ n: "twelve", s: "x" }))
      )
    })
    it("preserve in parse options is honoured", () => {
      const answer = decoderFor(unsupported.parseOptions)({ s: "x", extra: 1 })
      expect(answer._tag === "Right" && answer.right).toStrictEqual({ s: "x", extra: 1 })
    })
  })
})

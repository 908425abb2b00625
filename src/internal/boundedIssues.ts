/**
 * Schema errors described without walking the value that failed: Effect's formatters print the
 * `actual` through a recursive inspection, which throws RangeError on an array nested a few
 * thousand deep (anyone who can write a Sandbox's status can send one).
 */
import type { ParseResult } from "effect"

/** One issue: where, and what was expected and seen. */
export interface BoundedIssue {
  readonly path: ReadonlyArray<PropertyKey>
  readonly message: string
}

export const PreviewChars = 100

/** A JSON-like preview of at most `max` characters, built by an explicit stack (no recursion). */
export const preview = (value: unknown, max: number = PreviewChars): string => {
  let out = ""
  const stack: Array<unknown> = [value]
  // Markers for closing brackets and separators, so nesting costs heap, never call stack.
  while (stack.length > 0 && out.length <= max) {
    const v = stack.pop()
    if (v instanceof Token) {
      out += v.text
      continue
    }
    if (v === null || typeof v === "number" || typeof v === "boolean") out += String(v)
    else if (v === undefined) out += "undefined"
    else if (typeof v === "string") out += JSON.stringify(v.length > max ? v.slice(0, max + 1) : v)
    else if (typeof v === "bigint") out += `${v}n`
    else if (Array.isArray(v)) {
      out += "["
      stack.push(new Token("]"))
      for (let i = Math.min(v.length, max) - 1; i >= 0; i--) {
        stack.push(v[i])
        if (i > 0) stack.push(new Token(","))
      }
    } else if (typeof v === "object") {
      out += "{"
      stack.push(new Token("}"))
      const keys = Object.keys(v).slice(0, max)
      for (let i = keys.length - 1; i >= 0; i--) {
        stack.push((v as Record<string, unknown>)[keys[i]!])
        stack.push(new Token(`${JSON.stringify(keys[i]!.slice(0, max + 1))}:`))
        if (i > 0) stack.push(new Token(","))
      }
    } else out += typeof v
  }
  return out.length > max || stack.length > 0 ? `${out.slice(0, max - 1)}…` : out
}

class Token {
  constructor(readonly text: string) {}
}

/**
 * The issues of a ParseIssue tree as `ArrayFormatter` words them (`Expected string, actual 5`),
 * the actual value shown by `preview`. The issue tree is walked by a stack too.
 */
export const boundedIssues = (root: ParseResult.ParseIssue): ReadonlyArray<BoundedIssue> => {
  const out: Array<BoundedIssue> = []
  const stack: Array<readonly [ParseResult.ParseIssue, ReadonlyArray<PropertyKey>]> = [[root, []]]
  while (stack.length > 0) {
    const [issue, path] = stack.pop()!
    switch (issue._tag) {
      case "Type":
        out.push({ path, message: issue.message ?? `Expected ${String(issue.ast)}, actual ${preview(issue.actual)}` })
        break
      case "Forbidden":
        out.push({ path, message: issue.message ?? "is forbidden" })
        break
      case "Unexpected":
        out.push({ path, message: issue.message ?? "is unexpected" })
        break
      case "Missing":
        out.push({ path, message: issue.message ?? "is missing" })
        break
      case "Pointer":
        stack.push([issue.issue, path.concat(issue.path)])
        break
      case "Composite": {
        const children = Array.isArray(issue.issues) ? issue.issues : [issue.issues as ParseResult.ParseIssue]
        for (let i = children.length - 1; i >= 0; i--) stack.push([children[i]!, path])
        break
      }
      case "Refinement":
      case "Transformation":
        stack.push([issue.issue, path])
        break
    }
  }
  return out
}

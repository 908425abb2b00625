/**
 * The simulated apiserver's reading of list and watch queries, row by row: what kube-apiserver v1.20
 * accepts, and the Status it answers for what it does not (`src/internal/simulator/requests.ts`).
 */
import { Either } from "effect"
import { describe, expect, it } from "vitest"
import { listRequestOf, watchRequestOf } from "../src/internal/simulator/requests.ts"

const query = (text: string) => new URLSearchParams(text)

/** A row's outcome, short: the Status code and message, or the parts of the request a row names. */
const refused = (result: Either.Either<unknown, { code: number; message: string }>) =>
  Either.isLeft(result) ? `${result.left.code} ${result.left.message}` : "accepted"

describe("listRequestOf", () => {
  it.each([
    {
      asked: "resourceVersionMatch without a resourceVersion",
      q: "resourceVersionMatch=NotOlderThan",
      answer:
        "422 ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
    },
    {
      asked: "resourceVersionMatch with continue",
      q: "resourceVersion=5&resourceVersionMatch=Exact&continue=abc",
      answer:
        "422 ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided"
    },
    {
      asked: "Exact at resourceVersion 0",
      q: "resourceVersion=0&resourceVersionMatch=Exact",
      answer:
        "422 ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
    },
    {
      asked: "an unknown resourceVersionMatch",
      q: "resourceVersion=5&resourceVersionMatch=Newest",
      answer:
        "422 ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Unsupported value: \"Newest\": supported values: \"Exact\", \"NotOlderThan\", \"\""
    },
    {
      asked: "sendInitialEvents on a list",
      q: "sendInitialEvents=true",
      answer:
        "422 ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"
    },
    {
      asked: "a limit that is not a number",
      q: "limit=ten",
      answer: "400 limit: Invalid value: \"ten\": must be an integer"
    },
    { asked: "a label selector that does not parse", q: "labelSelector=a%20in%20(b", answer: "400" },
    { asked: "a plain paged list", q: "limit=500&labelSelector=jr2.dev%2Frun", answer: "accepted" }
  ])("$asked", ({ answer, q }) => {
    const got = refused(listRequestOf(query(q)))
    if (answer === "400") expect(got.startsWith("400 ")).toBe(true)
    else expect(got).toBe(answer)
  })

  it("reads what a list asks: a limit of 0 is the whole list, the rest as given", () => {
    const request = Either.getOrThrow(
      listRequestOf(query("limit=0&resourceVersion=7&resourceVersionMatch=NotOlderThan"))
    )
    expect([request.limit, request.resourceVersion, request.match, request.continueToken]).toEqual([
      undefined,
      "7",
      "NotOlderThan",
      ""
    ])
    expect(Either.getOrThrow(listRequestOf(query("limit=2"))).limit).toBe(2)
  })
})

describe("watchRequestOf", () => {
  it.each([
    {
      asked: "sendInitialEvents without NotOlderThan and without bookmarks",
      q: "sendInitialEvents=true",
      answer:
        "422 ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan, allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true]"
    },
    {
      asked: "resourceVersionMatch without sendInitialEvents",
      q: "resourceVersion=5&resourceVersionMatch=NotOlderThan",
      answer:
        "422 ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
    },
    {
      asked: "a resourceVersion that is not a number",
      q: "resourceVersion=abc",
      answer: "400 invalid resource version: \"abc\""
    },
    {
      asked: "a timeout that is not a number",
      q: "timeoutSeconds=soon",
      answer: "400 timeoutSeconds: Invalid value: \"soon\": must be an integer"
    }
  ])("$asked", ({ answer, q }) => {
    expect(refused(watchRequestOf(query(q)))).toBe(answer)
  })

  it.each([
    { asked: "no resourceVersion: every object now, then what follows", q: "", mode: "initial" },
    { asked: "a resourceVersion: what follows it", q: "resourceVersion=42", mode: "from" },
    {
      asked: "sendInitialEvents=true: the objects, a bookmark at their end, then what follows",
      q: "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
      mode: "initialWithBookmark"
    },
    {
      asked: "sendInitialEvents=false: what follows only",
      q: "sendInitialEvents=false&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
      mode: "from"
    }
  ])("$asked", ({ mode, q }) => {
    expect(Either.getOrThrow(watchRequestOf(query(q))).mode).toBe(mode)
  })

  it("reads the rest: bookmarks asked, a timeout of 0 is the server's choice", () => {
    const request = Either.getOrThrow(watchRequestOf(query("resourceVersion=9&allowWatchBookmarks=1&timeoutSeconds=0")))
    expect([request.asked, request.allowBookmarks, request.timeoutSeconds]).toEqual([9, true, undefined])
    expect(Either.getOrThrow(watchRequestOf(query("timeoutSeconds=240&allowWatchBookmarks=false"))).timeoutSeconds)
      .toBe(240)
  })
})

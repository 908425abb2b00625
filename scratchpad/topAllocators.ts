/**
 * Not a probe: the functions that allocate most in a V8 sampling heap profile (self bytes per
 * operation; the sampler's view, so a function the JIT inlined counts in its caller), shared by
 * `tellCost.ts` and `wakeCost.ts`.
 */

export interface ProfileNode {
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  readonly selfSize: number
  readonly children: ReadonlyArray<ProfileNode>
}

/** Prints the `top` functions of the profile under `head`, in bytes per one of `operations`. */
export const printTopAllocators = (head: ProfileNode, operations: number, top: number): void => {
  const bytes = new Map<string, number>()
  const walk = (node: ProfileNode) => {
    const { functionName, lineNumber, url } = node.callFrame
    const key = `${functionName || "(anonymous)"} ${
      url.replace(/^.*node_modules\//, "").replace(/^.*\/(src|scratchpad)\//, "$1/")
    }:${lineNumber + 1}`
    if (node.selfSize > 0) bytes.set(key, (bytes.get(key) ?? 0) + node.selfSize)
    for (const child of node.children) walk(child)
  }
  walk(head)
  for (const [key, size] of [...bytes].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    console.log(`  ${(size / operations).toFixed(0).padStart(6)} B  ${key}`)
  }
}

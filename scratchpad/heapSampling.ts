/**
 * Not a probe: V8's sampling heap profiler as the probes use it. Start it over a window, label a
 * frame, and print the functions that allocate most (self bytes per operation; the sampler's view,
 * so a function the JIT inlined counts in its caller). Shared by `tellCost.ts`, `wakeCost.ts`,
 * `channelRetention.ts` and `eventGarbage.ts`.
 */
import { Session } from "node:inspector/promises"

export interface CallFrame {
  readonly functionName: string
  readonly url: string
  readonly lineNumber: number
}

export interface ProfileNode {
  readonly callFrame: CallFrame
  readonly selfSize: number
  readonly children: ReadonlyArray<ProfileNode>
}

/**
 * Starts sampling, one sample per `samplingInterval` bytes on average. Samples of objects that a
 * full collection took are kept. So are those a young collection took, unless
 * `keepCollectedByMinorGC` is false (then what is left is what young collections did not take back).
 * `stop` ends the window and gives the profile's root.
 */
export const startHeapSampling = async (
  samplingInterval: number,
  keepCollectedByMinorGC = true
): Promise<{ readonly stop: () => Promise<ProfileNode> }> => {
  const session = new Session()
  session.connect()
  await session.post("HeapProfiler.enable")
  await session.post("HeapProfiler.startSampling", {
    samplingInterval,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: keepCollectedByMinorGC
  })
  return {
    stop: async () => {
      const { profile } = await session.post("HeapProfiler.stopSampling")
      session.disconnect()
      return profile.head as unknown as ProfileNode
    }
  }
}

/** `function file:line`, with the path cut to the package (`effect/dist/...`) or to `src/`/`scratchpad/`. */
export const frameLabel = ({ functionName, lineNumber, url }: CallFrame): string =>
  `${functionName || "(anonymous)"} ${url.replace(/^.*node_modules\//, "").replace(/^.*\/(src|scratchpad)\//, "$1/")}:${
    lineNumber + 1
  }`

/** Prints the `top` functions of the profile under `head`, in bytes per one of `operations`. */
export const printTopAllocators = (head: ProfileNode, operations: number, top: number): void => {
  const bytes = new Map<string, number>()
  const walk = (node: ProfileNode) => {
    const key = frameLabel(node.callFrame)
    if (node.selfSize > 0) bytes.set(key, (bytes.get(key) ?? 0) + node.selfSize)
    for (const child of node.children) walk(child)
  }
  walk(head)
  for (const [key, size] of [...bytes].sort((a, b) => b[1] - a[1]).slice(0, top)) {
    console.log(`  ${(size / operations).toFixed(0).padStart(6)} B  ${key}`)
  }
}

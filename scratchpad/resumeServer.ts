/**
 * The loopback apiserver the resume scratches share: a list of `listed` Sandboxes, and watches that
 * each send one MODIFIED and end (a resume per watch), or, `held`, stay open and get one event every
 * 2 ms (each its own network read).
 */
import * as http from "node:http"
import { makeSandbox, nameOf } from "../test/bench/data.ts"

/** A small Sandbox (a name, a resourceVersion, a phase): what the early scratches measured with. */
export const smallSandbox = (index: number, resourceVersion: number) => ({
  apiVersion: "jr2.dev/v1alpha1",
  kind: "Sandbox",
  metadata: {
    name: nameOf(index),
    namespace: "ns",
    resourceVersion: String(resourceVersion),
    labels: { "jr2.dev/run": "r" }
  },
  status: { phase: "Ready" }
})

/** The benchmark's own Sandbox (~3.2 KB of JSON with its managedFields). */
export const benchSandbox = (index: number, resourceVersion: number, inEvent: boolean) =>
  makeSandbox(index, inEvent ? resourceVersion : 0, resourceVersion, "ns")

export interface ResumeServer {
  readonly url: string
  /** Watch events sent so far (without `held`: watches answered). */
  readonly sent: () => number
  /** Resolves when the next event is sent. */
  readonly nextSent: () => Promise<void>
  readonly close: () => void
}

export const startResumeServer = async (options: {
  readonly listed: number
  /** Which listed Sandbox the event at `resourceVersion` modifies. */
  readonly target: (resourceVersion: number) => number
  readonly object?: (index: number, resourceVersion: number, inEvent: boolean) => unknown
  readonly held?: boolean
}): Promise<ResumeServer> => {
  const object = options.object ?? smallSandbox
  const listBody = JSON.stringify({
    kind: "SandboxList",
    apiVersion: "jr2.dev/v1alpha1",
    metadata: { resourceVersion: String(options.listed) },
    items: Array.from({ length: options.listed }, (_, i) => object(i, i + 1, false))
  })
  let resourceVersion = options.listed
  let sent = 0
  let waiting: Array<() => void> = []
  const eventLine = () => {
    resourceVersion++
    sent++
    const woken = waiting
    waiting = []
    woken.forEach((resolve) => resolve())
    const event = { type: "MODIFIED", object: object(options.target(resourceVersion), resourceVersion, true) }
    return JSON.stringify(event) + "\n"
  }
  const server = http.createServer((req, res) => {
    res.writeHead(200, { "content-type": "application/json" })
    if (!req.url?.includes("watch=")) {
      res.end(listBody)
    } else if (options.held === true) {
      const timer = setInterval(() => res.write(eventLine()), 2)
      res.on("close", () => clearInterval(timer))
    } else {
      res.end(eventLine())
    }
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    sent: () => sent,
    nextSent: () => new Promise<void>((resolve) => waiting.push(resolve)),
    close: () => {
      server.closeAllConnections()
      server.close()
    }
  }
}

/** What `run` cost per watch the server answered meanwhile: CPU (this process's) and wall time, in µs. */
export const timeResumes = async (
  server: ResumeServer,
  run: () => Promise<void>
): Promise<{ readonly resumes: number; readonly cpuMicros: number; readonly wallMicros: number }> => {
  const c0 = process.cpuUsage()
  const t0 = performance.now()
  const w0 = server.sent()
  await run()
  const cpu = process.cpuUsage(c0)
  const resumes = server.sent() - w0
  return {
    resumes,
    cpuMicros: (cpu.user + cpu.system) / resumes,
    wallMicros: ((performance.now() - t0) * 1000) / resumes
  }
}

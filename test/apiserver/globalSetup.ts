/**
 * vitest `globalSetup` for the apiserver suite: one real etcd + kube-apiserver for the whole run,
 * stopped in teardown whatever the tests did. The connection facts reach the tests through
 * `provide("apiserver")` and a JSON file (`SANDBOX_WATCH_APISERVER_FACTS`); a restart is asked of
 * this process over a loopback control endpoint, since the processes belong to it.
 *
 * No server, no suite: a missing binary or a server that never gets ready fails the run loudly.
 */
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import * as path from "node:path"
import type { TestProject } from "vitest/node"
import type { SuiteFacts } from "./ApiServerFacts.ts"
import * as RealApiServer from "./RealApiServer.ts"

const banner = (lines: ReadonlyArray<string>) => {
  const rule = "=".repeat(78)
  return [rule, ...lines, rule].join("\n")
}

/** `POST /restart-apiserver?signal=SIGKILL|SIGTERM`, with the control token in `x-control-token`. */
const controlServer = (server: RealApiServer.RealApiServer, token: string): Promise<http.Server> =>
  new Promise((resolve) => {
    const control = http.createServer((req, res) => {
      const reply = (status: number, body: unknown) => {
        res.writeHead(status, { "content-type": "application/json" })
        res.end(JSON.stringify(body))
      }
      if (req.headers["x-control-token"] !== token) return reply(403, { error: "wrong control token" })
      const url = new URL(req.url ?? "/", "http://127.0.0.1")
      if (req.method === "POST" && url.pathname === "/restart-apiserver") {
        const signal = url.searchParams.get("signal") === "SIGKILL" ? "SIGKILL" : "SIGTERM"
        server.restartApiServer({ signal }).then(
          (result) => {
            console.log(`[apiserver] kube-apiserver restarted (${signal}); ready again in ${result.readyMs} ms`)
            reply(200, result)
          },
          (error: unknown) => reply(500, { error: String(error instanceof Error ? error.message : error) })
        )
        return
      }
      reply(404, { error: `no ${req.method} ${url.pathname}` })
    })
    control.listen(0, "127.0.0.1", () => resolve(control))
  })

export default async function setup(project: TestProject) {
  let server: RealApiServer.RealApiServer
  try {
    server = await RealApiServer.start()
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error)
    console.error(banner([
      "The apiserver suite cannot run: no real kube-apiserver + etcd could be started.",
      message,
      process.env.CI === "true" ? "CI=true: this is a failure, not a skip." : "This is a failure, not a skip."
    ]))
    throw error
  }
  const t = server.timings
  console.log(
    `[apiserver] ${server.version} at ${server.url}: etcd ready in ${t.etcdReadyMs} ms, ` +
      `kube-apiserver ready in ${t.apiServerReadyMs} ms, bootstrap ${t.bootstrapMs} ms, total ${t.totalMs} ms (logs in ${server.dir})`
  )

  const controlToken = randomBytes(16).toString("hex")
  const control = await controlServer(server, controlToken)
  const facts: SuiteFacts = {
    ...RealApiServer.facts(server),
    controlUrl: `http://127.0.0.1:${(control.address() as AddressInfo).port}`,
    controlToken
  }
  const factsFile = path.join(server.dir, "facts.json")
  fs.writeFileSync(factsFile, JSON.stringify(facts, null, 2), { mode: 0o600 })
  process.env.SANDBOX_WATCH_APISERVER_FACTS = factsFile
  project.provide("apiserver", facts)

  return async () => {
    await new Promise<void>((resolve) => {
      control.close(() => resolve())
      control.closeAllConnections()
    })
    const stopping = Date.now()
    await server.stop()
    console.log(`[apiserver] etcd and kube-apiserver stopped in ${Date.now() - stopping} ms`)
    delete process.env.SANDBOX_WATCH_APISERVER_FACTS
  }
}

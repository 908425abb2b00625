/**
 * A forward proxy on loopback that only tunnels (HTTP CONNECT), as corporate proxies do, and
 * records every tunnel it opened. Only loopback targets are let through.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Net from "node:net"

export interface ConnectProxy {
  readonly url: string
  /** `host:port` of each tunnel asked for, in order. */
  readonly tunnels: Effect.Effect<ReadonlyArray<string>>
}

export const make: Effect.Effect<ConnectProxy, never, Scope.Scope> = Effect.gen(function*() {
  const tunnels: Array<string> = []
  const sockets = new Set<Net.Socket>()
  const server = Http.createServer((_request, response) => {
    response.writeHead(405, { "content-type": "text/plain" })
    response.end("this proxy only tunnels (CONNECT)\n")
  })
  server.on("connect", (request: Http.IncomingMessage, client: Net.Socket, head: Buffer) => {
    const target = request.url ?? ""
    tunnels.push(target)
    const [host, port] = target.split(":")
    if (host !== "127.0.0.1" && host !== "localhost") {
      client.end("HTTP/1.1 403 Forbidden\r\n\r\n")
      return
    }
    const upstream = Net.connect(Number(port), host, () => {
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n")
      if (head.length > 0) upstream.write(head)
      upstream.pipe(client)
      client.pipe(upstream)
    })
    for (const socket of [client, upstream]) {
      sockets.add(socket)
      socket.on("close", () => sockets.delete(socket))
      socket.on("error", () => {
        client.destroy()
        upstream.destroy()
      })
    }
  })
  const port = yield* Effect.acquireRelease(
    Effect.async<number>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
    }),
    () =>
      Effect.async<void>((resume) => {
        for (const socket of sockets) socket.destroy()
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )
  return { url: `http://127.0.0.1:${port}`, tunnels: Effect.sync(() => tunnels.slice()) }
})

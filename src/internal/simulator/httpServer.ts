/**
 * The simulated apiserver's HTTP server on a loopback port, for as long as the scope lives, and its
 * orderly end: every open watch is ended cleanly, then whatever connection is left is cut, then the
 * server closes.
 *
 * @internal
 */
import type { HttpApp } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Stream } from "effect"
import * as Http from "node:http"
import type * as Net from "node:net"
import type { WatchServer } from "./watchBody.ts"
import { closeWatches } from "./watchBody.ts"

export interface Listening {
  /** `http://127.0.0.1:PORT`, no trailing slash. */
  readonly url: string
  /** The open client connections, for a test to reset. Only the server adds and removes them. */
  readonly sockets: ReadonlySet<Net.Socket>
}

/** Serves `app` on 127.0.0.1 (`port` 0 picks a free one). */
export const listen = <E, R>(
  app: HttpApp.Default<E, R>,
  port: number,
  { openWatchCount, watches }: Pick<WatchServer, "watches" | "openWatchCount">
) =>
  Effect.gen(function*() {
    const sockets = new Set<Net.Socket>()
    const nodeServer = Http.createServer()
    nodeServer.on("connection", (socket: Net.Socket) => {
      sockets.add(socket)
      socket.on("close", () => sockets.delete(socket))
    })
    const httpServer = yield* NodeHttpServer.make(() => nodeServer, { port, host: "127.0.0.1" })
    yield* httpServer.serve(app)
    const address = httpServer.address
    const url = address._tag === "TcpAddress" ? `http://127.0.0.1:${address.port}` : "http://127.0.0.1"

    // Runs before the server's own close: end watches cleanly, then cut whatever is left.
    yield* Effect.addFinalizer(() =>
      closeWatches(watches).pipe(
        Effect.zipRight(openWatchCount.changes.pipe(Stream.filter((n) => n === 0), Stream.take(1), Stream.runDrain)),
        Effect.zipRight(Effect.sync(() => nodeServer.closeAllConnections()))
      )
    )
    const listening: Listening = { url, sockets }
    return listening
  })

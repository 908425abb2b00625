/**
 * The fault proxy against local echo and HTTP servers on loopback. Real sockets, so `it.live`;
 * every wait is on an event (bytes arrived, a socket closed, a counter moved), never on a clock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Scope } from "effect"
import * as http from "node:http"
import * as net from "node:net"
import * as FaultProxy from "./support/FaultProxy.ts"

/** An echo server that records what it received and how its connections ended. */
interface EchoServer {
  readonly port: number
  readonly received: () => string
  readonly closedConnections: () => number
}

const echoServer: Effect.Effect<EchoServer, never, Scope.Scope> = Effect.acquireRelease(
  Effect.async<{ server: net.Server; sockets: Set<net.Socket>; state: { received: string; closed: number } }>(
    (resume) => {
      const state = { received: "", closed: 0 }
      const sockets = new Set<net.Socket>()
      const server = net.createServer((socket) => {
        sockets.add(socket)
        socket.on("data", (chunk: Buffer) => {
          state.received += chunk.toString("utf8")
          socket.write(chunk)
        })
        socket.on("end", () => socket.end())
        socket.on("error", () => {})
        socket.on("close", () => {
          sockets.delete(socket)
          state.closed += 1
        })
      })
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed({ server, sockets, state })))
    }
  ),
  ({ server, sockets }) =>
    Effect.async<void>((resume) => {
      for (const socket of sockets) socket.destroy()
      server.close(() => resume(Effect.void))
    })
).pipe(
  Effect.map(({ server, state }) => ({
    port: (server.address() as net.AddressInfo).port,
    received: () => state.received,
    closedConnections: () => state.closed
  }))
)

/** A client socket with event-driven waits. */
interface Client {
  readonly write: (text: string) => Effect.Effect<void>
  /** Waits until the bytes received so far equal `text`, and returns them. */
  readonly receive: (text: string) => Effect.Effect<string>
  readonly received: () => string
  /** How the connection ended: the error code, or "closed" for a clean close. */
  readonly ended: Effect.Effect<string>
  readonly end: Effect.Effect<void>
}

const connect = (port: number): Effect.Effect<Client, string, Scope.Scope> =>
  Effect.gen(function*() {
    const ended = yield* Deferred.make<string>()
    let received = ""
    let onData: (() => void) | undefined
    const socket = yield* Effect.acquireRelease(
      Effect.async<net.Socket, string>((resume) => {
        const socket = net.connect({ host: "127.0.0.1", port })
        const onConnectError = (error: NodeJS.ErrnoException) => resume(Effect.fail(error.code ?? error.message))
        socket.once("error", onConnectError)
        socket.once("connect", () => {
          socket.off("error", onConnectError)
          resume(Effect.succeed(socket))
        })
      }),
      (socket) => Effect.sync(() => socket.destroy())
    )
    let lastError = "closed"
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString("utf8")
      onData?.()
    })
    socket.on("error", (error: NodeJS.ErrnoException) => {
      lastError = error.code ?? error.message
    })
    socket.on("close", () => Deferred.unsafeDone(ended, Effect.succeed(lastError)))
    return {
      write: (text) => Effect.async<void>((resume) => void socket.write(text, () => resume(Effect.void))),
      receive: (text) =>
        Effect.async<string>((resume) => {
          const check = () => {
            if (received.length >= text.length) {
              onData = undefined
              resume(Effect.succeed(received))
            }
          }
          onData = check
          check()
        }),
      received: () => received,
      ended: Deferred.await(ended),
      end: Effect.sync(() => void socket.end())
    }
  })

describe("FaultProxy", () => {
  it.live("forwards both ways and counts connections and bytes", () =>
    Effect.scoped(Effect.gen(function*() {
      const echo = yield* echoServer
      const proxy = yield* FaultProxy.make({ targetPort: echo.port })
      expect(proxy.url("https")).toBe(`https://127.0.0.1:${proxy.port}`)
      const client = yield* connect(proxy.port)
      yield* client.write("hello")
      expect(yield* client.receive("hello")).toBe("hello")
      expect(echo.received()).toBe("hello")
      const stats = yield* proxy.stats
      expect(stats).toEqual({
        mode: "forward",
        accepted: 1,
        active: 1,
        rejected: 0,
        reset: 0,
        bytesToServer: 5,
        bytesToClient: 5,
        bytesHeld: 0
      })
      yield* client.end
      expect(yield* client.ended).toBe("closed")
      const after = yield* proxy.waitFor((s) => s.active === 0)
      expect(after.accepted).toBe(1)
    })))

  it.live("resetAll cuts open connections mid-stream with a reset on both sides", () =>
    Effect.scoped(Effect.gen(function*() {
      const echo = yield* echoServer
      const proxy = yield* FaultProxy.make({ targetPort: echo.port })
      const first = yield* connect(proxy.port)
      const second = yield* connect(proxy.port)
      yield* first.write("a")
      yield* first.receive("a")
      yield* second.write("b")
      yield* second.receive("b")
      expect(yield* proxy.resetAll).toBe(2)
      expect(yield* first.ended).toBe("ECONNRESET")
      expect(yield* second.ended).toBe("ECONNRESET")
      const stats = yield* proxy.stats
      expect([stats.mode, stats.active, stats.reset, stats.accepted]).toEqual(["forward", 0, 2, 2])
      // The mode is unchanged: a new connection goes through.
      const third = yield* connect(proxy.port)
      yield* third.write("c")
      expect(yield* third.receive("c")).toBe("c")
      expect(echo.received()).toBe("abc")
    })))

  it.live("stall holds bytes with sockets open; heal writes them on", () =>
    Effect.scoped(Effect.gen(function*() {
      const echo = yield* echoServer
      const proxy = yield* FaultProxy.make({ targetPort: echo.port })
      const client = yield* connect(proxy.port)
      yield* client.write("before;")
      yield* client.receive("before;")
      yield* proxy.stall
      yield* client.write("during")
      const stalled = yield* proxy.waitFor((s) => s.bytesHeld === 6)
      expect([stalled.mode, stalled.active, stalled.bytesToServer]).toEqual(["stall", 1, 7])
      // The proxy never wrote the held bytes, so the server cannot have them.
      expect(echo.received()).toBe("before;")
      // A connection opened during the stall is accepted and held too.
      const late = yield* connect(proxy.port)
      yield* late.write("late")
      yield* proxy.waitFor((s) => s.bytesHeld === 10)
      expect(client.received()).toBe("before;")
      yield* proxy.heal
      expect(yield* client.receive("before;during")).toBe("before;during")
      expect(yield* late.receive("late")).toBe("late")
      const healed = yield* proxy.stats
      expect([healed.mode, healed.bytesHeld, healed.bytesToServer, healed.bytesToClient, healed.reset]).toEqual([
        "forward",
        0,
        17,
        17,
        0
      ])
    })))

  it.live("reject resets new connections at once while open ones carry on", () =>
    Effect.scoped(Effect.gen(function*() {
      const echo = yield* echoServer
      const proxy = yield* FaultProxy.make({ targetPort: echo.port })
      const open = yield* connect(proxy.port)
      yield* proxy.reject
      // The reset can come before or after the client saw its connect complete.
      const rejected = connect(proxy.port).pipe(Effect.flatMap((client) => client.ended), Effect.merge)
      expect(yield* rejected).toBe("ECONNRESET")
      yield* open.write("still here")
      expect(yield* open.receive("still here")).toBe("still here")
      yield* proxy.heal
      const after = yield* connect(proxy.port)
      yield* after.write("x")
      expect(yield* after.receive("x")).toBe("x")
      const stats = yield* proxy.stats
      expect([stats.accepted, stats.rejected, stats.active]).toEqual([2, 1, 2])
    })))

  it.live("refuse closes the listener; heal listens again on the same port", () =>
    Effect.scoped(Effect.gen(function*() {
      const echo = yield* echoServer
      const proxy = yield* FaultProxy.make({ targetPort: echo.port })
      const open = yield* connect(proxy.port)
      yield* proxy.refuse
      expect(yield* Effect.flip(connect(proxy.port))).toBe("ECONNREFUSED")
      yield* open.write("open")
      expect(yield* open.receive("open")).toBe("open")
      yield* proxy.heal
      const again = yield* connect(proxy.port)
      yield* again.write("again")
      expect(yield* again.receive("again")).toBe("again")
      expect((yield* proxy.stats).accepted).toBe(2)
    })))

  it.live("an HTTP request through a stall completes only after heal", () =>
    Effect.scoped(Effect.gen(function*() {
      let requests = 0
      const server = yield* Effect.acquireRelease(
        Effect.async<http.Server>((resume) => {
          const server = http.createServer((_req, res) => {
            requests += 1
            res.writeHead(200, { "content-type": "text/plain" })
            res.end(`response ${requests}`)
          })
          server.listen(0, "127.0.0.1", () => resume(Effect.succeed(server)))
        }),
        (server) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)).closeAllConnections())
      )
      const proxy = yield* FaultProxy.make({ targetPort: (server.address() as net.AddressInfo).port })
      const get = Effect.tryPromise(() => fetch(`${proxy.url("http")}/`).then((res) => res.text()))
      expect(yield* get).toBe("response 1")
      yield* proxy.stall
      const pending = yield* Effect.fork(get)
      yield* proxy.waitFor((s) => s.bytesHeld > 0)
      expect(requests).toBe(1)
      yield* proxy.heal
      expect(yield* pending.await.pipe(Effect.flatten)).toBe("response 2")
    })))

  it.live("closing the scope destroys open connections and frees the port", () =>
    Effect.scoped(Effect.gen(function*() {
      const echo = yield* echoServer
      const proxyScope = yield* Scope.make()
      const proxy = yield* FaultProxy.make({ targetPort: echo.port }).pipe(Scope.extend(proxyScope))
      // The client lives in the outer scope: only the proxy's release can end it.
      const client = yield* connect(proxy.port)
      yield* client.write("x")
      yield* client.receive("x")
      yield* Scope.close(proxyScope, Exit.void)
      expect(yield* client.ended).toBe("closed")
      expect(yield* Effect.flip(Effect.scoped(connect(proxy.port)))).toBe("ECONNREFUSED")
    })))
})

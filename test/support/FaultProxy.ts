/**
 * A TCP proxy on loopback, between a client under test and a server (the real kube-apiserver, an
 * echo server), that breaks the connection on demand: reset every open connection mid-stream,
 * stall (hold every byte, keep the sockets open), reject or refuse new connections, and heal.
 * It works below TLS, so an `https://` client keeps verifying the server's certificate through it.
 */
import { Data, Effect } from "effect"
import type { Scope } from "effect"
import * as net from "node:net"

/** What the proxy does with traffic now. */
export type FaultMode =
  /** Bytes flow both ways. */
  | "forward"
  /** Bytes are read and held in memory, nothing is written on; the sockets stay open. */
  | "stall"
  /** New connections are accepted and reset at once (the client sees ECONNRESET). */
  | "reject"
  /** The listener is closed: new connections get ECONNREFUSED. */
  | "refuse"

/** Counters since the proxy started. */
export interface FaultProxyStats {
  readonly mode: FaultMode
  /** Client connections accepted and forwarded (rejected ones are not counted here). */
  readonly accepted: number
  /** Connections open right now (client side). */
  readonly active: number
  /** Connections accepted and reset at once in `reject` mode. */
  readonly rejected: number
  /** Connections cut by `resetAll`. */
  readonly reset: number
  /** Bytes written on to the server / back to the client. */
  readonly bytesToServer: number
  readonly bytesToClient: number
  /** Bytes read and held during a stall, not yet written on. */
  readonly bytesHeld: number
}

export interface FaultProxy {
  readonly host: "127.0.0.1"
  readonly port: number
  /** `scheme://127.0.0.1:port`, for a client that speaks `scheme` to the target through the proxy. */
  readonly url: (scheme: "http" | "https") => string
  /** Cuts every open connection now with a TCP reset (both sides); the mode is unchanged. */
  readonly resetAll: Effect.Effect<number>
  /** Holds every byte from now on, both ways, on open and new connections alike. */
  readonly stall: Effect.Effect<void>
  /** Accepts and resets every new connection; open ones carry on. */
  readonly reject: Effect.Effect<void>
  /** Closes the listener: new connections are refused; open ones carry on. */
  readonly refuse: Effect.Effect<void>
  /** Back to `forward`: listens again if it was refusing, writes on whatever a stall held. */
  readonly heal: Effect.Effect<void, FaultProxyError>
  readonly stats: Effect.Effect<FaultProxyStats>
  /**
   * Waits until the counters satisfy `predicate` (checked now and on every change). Event-driven,
   * so a test waits for "the client reconnected" (`accepted >= 2`) without a clock.
   */
  readonly waitFor: (predicate: (stats: FaultProxyStats) => boolean) => Effect.Effect<FaultProxyStats>
}

/** The proxy could not listen on loopback. */
export class FaultProxyError extends Data.TaggedError("FaultProxyError")<{
  readonly message: string
  readonly cause: unknown
}> {}

export interface FaultProxyOptions {
  /** Where the server listens; `127.0.0.1` unless told. */
  readonly targetHost?: string
  readonly targetPort: number
  /** Port to listen on; a free one unless told (a restarted proxy can keep its port). */
  readonly listenPort?: number
}

/** A stall holds at most this much per direction per connection before it stops reading. */
const maxHeldBytes = 4 * 1024 * 1024

interface Pipe {
  readonly client: net.Socket
  readonly server: net.Socket
  readonly heldToServer: Array<Buffer>
  readonly heldToClient: Array<Buffer>
}

/**
 * Starts a proxy on 127.0.0.1 to `targetHost:targetPort`. Closing the scope closes the listener
 * and destroys every connection it holds.
 */
export const make = (options: FaultProxyOptions): Effect.Effect<FaultProxy, FaultProxyError, Scope.Scope> =>
  Effect.acquireRelease(Effect.suspend(() => start(options)), (proxy) => proxy.close)

const start = (
  options: FaultProxyOptions
): Effect.Effect<FaultProxy & { readonly close: Effect.Effect<void> }, FaultProxyError> =>
  Effect.gen(function*() {
    const targetHost = options.targetHost ?? "127.0.0.1"
    const pipes = new Set<Pipe>()
    const listeners = new Set<() => void>()
    let mode: FaultMode = "forward"
    let counters = { accepted: 0, rejected: 0, reset: 0, bytesToServer: 0, bytesToClient: 0 }
    let closed = false

    const snapshot = (): FaultProxyStats => {
      let held = 0
      for (const pipe of pipes) {
        for (const chunk of pipe.heldToServer) held += chunk.length
        for (const chunk of pipe.heldToClient) held += chunk.length
      }
      return { mode, ...counters, active: pipes.size, bytesHeld: held }
    }
    const changed = () => {
      for (const listener of [...listeners]) listener()
    }

    const heldBytes = (chunks: ReadonlyArray<Buffer>) => chunks.reduce((n, c) => n + c.length, 0)

    // One direction. Flow control by hand rather than `pipe()`: `pipe()` would resume a paused
    // source on `drain` and defeat the stall.
    const pump = (pipe: Pipe, src: net.Socket, dst: net.Socket, held: Array<Buffer>, toServer: boolean) => {
      src.on("data", (chunk: Buffer) => {
        if (mode === "stall") {
          held.push(chunk)
          if (heldBytes(held) >= maxHeldBytes) src.pause()
        } else {
          if (toServer) counters = { ...counters, bytesToServer: counters.bytesToServer + chunk.length }
          else counters = { ...counters, bytesToClient: counters.bytesToClient + chunk.length }
          if (!dst.write(chunk)) src.pause()
        }
        changed()
      })
      dst.on("drain", () => {
        if (mode !== "stall" && pipes.has(pipe)) src.resume()
      })
      // A half-close is passed on, unless bytes are still held: those go first, at heal.
      src.on("end", () => {
        if (held.length === 0) dst.end()
        else src.once("sandbox-watch:flushed", () => dst.end())
      })
    }

    const flush = (pipe: Pipe) => {
      const flushOne = (src: net.Socket, dst: net.Socket, held: Array<Buffer>, toServer: boolean) => {
        const chunks = held.splice(0, held.length)
        let ok = true
        for (const chunk of chunks) {
          if (toServer) counters = { ...counters, bytesToServer: counters.bytesToServer + chunk.length }
          else counters = { ...counters, bytesToClient: counters.bytesToClient + chunk.length }
          ok = dst.write(chunk)
        }
        src.emit("sandbox-watch:flushed")
        if (ok) src.resume()
      }
      flushOne(pipe.client, pipe.server, pipe.heldToServer, true)
      flushOne(pipe.server, pipe.client, pipe.heldToClient, false)
    }

    const drop = (pipe: Pipe) => {
      if (pipes.delete(pipe)) changed()
    }

    const onConnection = (client: net.Socket) => {
      if (closed) {
        client.destroy()
        return
      }
      if (mode === "reject") {
        counters = { ...counters, rejected: counters.rejected + 1 }
        client.on("error", () => {})
        client.resetAndDestroy()
        changed()
        return
      }
      client.setNoDelay(true)
      const server = net.connect({ host: targetHost, port: options.targetPort })
      server.setNoDelay(true)
      const pipe: Pipe = { client, server, heldToServer: [], heldToClient: [] }
      pipes.add(pipe)
      counters = { ...counters, accepted: counters.accepted + 1 }
      pump(pipe, client, server, pipe.heldToServer, true)
      pump(pipe, server, client, pipe.heldToClient, false)
      // An error on one side cuts the other with a reset: the client must see a broken
      // connection, not a clean end that looks like a finished response.
      server.on("error", () => {
        if (!client.destroyed) client.resetAndDestroy()
      })
      client.on("error", () => {
        if (!server.destroyed) server.resetAndDestroy()
      })
      client.on("close", () => {
        if (!server.destroyed) server.destroy()
        drop(pipe)
      })
      server.on("close", () => {
        // The client side closes after its held bytes went out (the `end` above) or now.
        if (pipe.heldToClient.length === 0 && !client.destroyed && client.writableEnded === false) client.end()
      })
      changed()
    }

    const listen = (port: number) =>
      Effect.async<net.Server, FaultProxyError>((resume) => {
        const server = net.createServer(onConnection)
        const onError = (cause: Error) =>
          resume(
            Effect.fail(
              new FaultProxyError({
                message: `The fault proxy could not listen on 127.0.0.1:${port}: ${cause.message}`,
                cause
              })
            )
          )
        server.once("error", onError)
        server.listen({ host: "127.0.0.1", port, exclusive: true }, () => {
          server.off("error", onError)
          resume(Effect.succeed(server))
        })
      })

    let listener: net.Server | undefined = yield* listen(options.listenPort ?? 0)
    const address = listener.address()
    if (address === null || typeof address === "string") {
      return yield* Effect.fail(
        new FaultProxyError({ message: "The fault proxy's listener has no TCP address.", cause: address })
      )
    }
    const port = address.port

    const closeListener = () => {
      const current = listener
      listener = undefined
      // Stops accepting now; existing connections are not waited for.
      current?.close()
    }

    const resetAll = Effect.sync(() => {
      const cut = [...pipes]
      for (const pipe of cut) {
        pipes.delete(pipe)
        pipe.heldToClient.length = 0
        pipe.heldToServer.length = 0
        if (!pipe.client.destroyed) pipe.client.resetAndDestroy()
        if (!pipe.server.destroyed) pipe.server.resetAndDestroy()
      }
      counters = { ...counters, reset: counters.reset + cut.length }
      changed()
      return cut.length
    })

    const setMode = (next: FaultMode) =>
      Effect.sync(() => {
        mode = next
        if (next === "refuse") closeListener()
        changed()
      })

    const heal = Effect.gen(function*() {
      if (listener === undefined && !closed) listener = yield* listen(port)
      mode = "forward"
      for (const pipe of pipes) flush(pipe)
      changed()
    })

    const waitFor = (predicate: (stats: FaultProxyStats) => boolean) =>
      Effect.async<FaultProxyStats>((resume) => {
        const check = () => {
          const now = snapshot()
          if (predicate(now)) {
            listeners.delete(check)
            resume(Effect.succeed(now))
          }
        }
        listeners.add(check)
        check()
        return Effect.sync(() => listeners.delete(check))
      })

    const close = Effect.sync(() => {
      closed = true
      closeListener()
      for (const pipe of pipes) {
        pipe.client.destroy()
        pipe.server.destroy()
      }
      pipes.clear()
      listeners.clear()
    })

    return {
      host: "127.0.0.1" as const,
      port,
      url: (scheme: "http" | "https") => `${scheme}://127.0.0.1:${port}`,
      resetAll,
      stall: setMode("stall"),
      reject: setMode("reject"),
      refuse: setMode("refuse"),
      heal,
      stats: Effect.sync(snapshot),
      waitFor,
      close
    }
  })

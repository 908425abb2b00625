/**
 * What survives each young collection while a watch tells `changes` subscribers: a held watch gets
 * an event every 2 ms from a loopback server in its own process (so its garbage is not counted), and
 * `SUBS` subscribers (default 100) on the names the events go round.
 * Run: SUBS=100 node --trace-gc-nvp --import tsx scratchpad/subscriberSurvivors.ts
 * and read `new_space_survived` of the last scavenges. Seen here (Node 20, 6 s): with the mailbox
 * emptied by `clear`, 1.5–1.8 MB survived each; by `delete`, 0.65–0.9 MB
 * (`scratchpad/mapClearSurvivors.ts` says why); with one subscriber, 0.36 MB.
 */
import { Effect, Layer, Stream } from "effect"
import { spawn } from "node:child_process"
import { createInterface } from "node:readline"
import * as KubeClient from "../src/KubeClient.ts"
import * as KubeConfig from "../src/KubeConfig.ts"
import * as SandboxWatch from "../src/SandboxWatch.ts"
import { nameOf } from "../test/bench/data.ts"
import { benchSandbox, startResumeServer } from "./resumeServer.ts"

if (process.argv[2] === "serve") {
  const server = await startResumeServer({ listed: 10_000, target: (rv) => rv % 100, object: benchSandbox, held: true })
  console.log(server.url)
} else {
  const child = spawn(process.execPath, ["--import", "tsx", new URL(import.meta.url).pathname, "serve"], {
    stdio: ["ignore", "pipe", "inherit"]
  })
  const url = await new Promise<string>((resolve) => createInterface({ input: child.stdout }).once("line", resolve))
  const clientLayer = KubeClient.layer.pipe(Layer.provide(KubeConfig.layerStatic({ server: url })))
  await Effect.runPromise(
    Effect.gen(function*() {
      const watch = yield* SandboxWatch.SandboxWatch
      for (let i = 0; i < Number(process.env.SUBS ?? 100); i++) {
        yield* Effect.forkScoped(Stream.runForEach(watch.changes(nameOf(i)), () => Effect.void))
      }
      yield* watch.synced
      yield* Effect.sleep("6 seconds")
    }).pipe(Effect.scoped, Effect.provide(SandboxWatch.layer({ namespace: "ns" }).pipe(Layer.provide(clientLayer))))
  )
  child.kill()
}

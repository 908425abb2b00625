import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"
import { selectedVersion } from "./RealApiServer.ts"

// The suite against a real kube-apiserver + etcd, the version `KUBE_APISERVER_VERSION` names:
// `npm run test:apiserver` (test/apiserver/run.sh) builds what is missing and runs it for each.
export default defineConfig({
  test: {
    root: fileURLToPath(new URL("../..", import.meta.url)),
    include: ["test/apiserver/**/*.test.ts"],
    // One server for the run, stopped in teardown even when tests fail.
    globalSetup: ["test/apiserver/globalSetup.ts"],
    // The files share that server (and one restarts it): one file at a time.
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    reporters: ["default", ["json", { outputFile: `.cache/vitest/apiserver-${selectedVersion()}.json` }]]
  }
})

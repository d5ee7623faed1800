// Starts the Cloud Storage emulator's Node server from firebase-tools without the `firebase` CLI,
// for tests/core/gcs_storage_test.cc:
//   node gcs_emulator.js PORT
// The CLI cannot start it here: it wants Java 21 and downloads the Security Rules jar. The
// server's GCS JSON API routes (apis/gcloud.js) check no rules (they use the admin storage layer),
// so the rules runtime is never started. Prints "ready PORT" once it listens on 127.0.0.1.
"use strict";
const path = require("path");
const os = require("os");
const fs = require("fs");

const lib = path.join(__dirname, "node_modules", "firebase-tools", "lib", "emulator");
const { StorageEmulator } = require(path.join(lib, "storage", "index.js"));
const { createApp } = require(path.join(lib, "storage", "server.js"));
const { EmulatorRegistry } = require(path.join(lib, "registry.js"));

async function main() {
  const port = Number(process.argv[2]);
  if (!port) throw new Error("usage: node gcs_emulator.js PORT");
  // Its blobs go under os.tmpdir(); a private one per run.
  process.env.TMPDIR = fs.mkdtempSync(path.join(os.tmpdir(), "gcs-emulator-"));
  const emulator = new StorageEmulator({ projectId: "orchard-test", host: "127.0.0.1", port, rules: [] });
  // Its bucket metadata and upload URLs ask the registry for the emulator's host and port; the
  // registry's start() would also start the rules runtime, so the instance is only recorded.
  EmulatorRegistry.set(emulator.getName(), emulator);
  const app = await createApp("orchard-test", emulator);
  const server = app.listen(port, "127.0.0.1", () => console.log("ready " + port));
  const stop = () => server.close(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});

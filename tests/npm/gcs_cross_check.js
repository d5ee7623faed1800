// Cross-checks Orchard's GCS client with Google's own Node client (@google-cloud/storage), run by
// tests/core/gcs_storage_test.cc against the emulator it started:
//   node gcs_cross_check.js ENDPOINT BUCKET READ_NAME WRITE_NAME
// reads READ_NAME (written by Orchard) and prints "sha256 <hex>" of its bytes, then writes
// WRITE_NAME (one upload) with 600000 bytes of the pattern byte[i] =
// (i * 7 + 3) mod 256 and prints "wrote N" for Orchard to read.
"use strict";
const crypto = require("crypto");
const { Storage } = require("@google-cloud/storage");

async function main() {
  const [endpoint, bucket, readName, writeName] = process.argv.slice(2);
  // A custom endpoint without credentials, as STORAGE_EMULATOR_HOST gives.
  const storage = new Storage({ apiEndpoint: endpoint, projectId: "orchard-test" });
  const [bytes] = await storage.bucket(bucket).file(readName).download();
  console.log("sha256 " + crypto.createHash("sha256").update(bytes).digest("hex"));
  const body = Buffer.alloc(600000);
  for (let i = 0; i < body.length; ++i) body[i] = (i * 7 + 3) & 255;
  await storage.bucket(bucket).file(writeName).save(body, { resumable: false, contentType: "application/octet-stream" });
  console.log("wrote " + body.length);
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});

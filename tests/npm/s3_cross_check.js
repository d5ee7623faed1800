// Cross-checks Orchard's S3 client with an independent one (@aws-sdk/client-s3), run by
// tests/core/s3_storage_test.cc against the s3rver it started:
//   node s3_cross_check.js ENDPOINT BUCKET READ_KEY WRITE_KEY
// reads READ_KEY (written by Orchard) and prints "sha256 <hex>" of its bytes, then writes
// WRITE_KEY with the text "written by the AWS SDK" for Orchard to read.
"use strict";
const crypto = require("crypto");
const { S3Client, GetObjectCommand, PutObjectCommand } = require("@aws-sdk/client-s3");

async function main() {
  const [endpoint, bucket, readKey, writeKey] = process.argv.slice(2);
  const client = new S3Client({
    endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" },
    // s3rver keeps aws-chunked framing in the object: send plain bodies.
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
  });
  const got = await client.send(new GetObjectCommand({ Bucket: bucket, Key: readKey }));
  const bytes = Buffer.from(await got.Body.transformToByteArray());
  console.log("sha256 " + crypto.createHash("sha256").update(bytes).digest("hex"));
  const body = Buffer.from("written by the AWS SDK");
  await client.send(new PutObjectCommand({ Bucket: bucket, Key: writeKey, Body: body, ContentLength: body.length }));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
